"""Kept for the old path ``ptyacc.speedtest``: this name is the module ``ptyacc.speed.speedtest`` itself."""

import sys

from ptyacc.speed import speedtest

sys.modules[__name__] = speedtest
