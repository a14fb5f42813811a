"""Kept for the old path ``ptyacc.scaling``: this name is the module ``ptyacc.speed.scaling`` itself."""

import sys

from ptyacc.speed import scaling

sys.modules[__name__] = scaling
