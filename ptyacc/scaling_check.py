"""Kept for the old path ``ptyacc.scaling_check``: this name is the module ``ptyacc.speed.scaling_check`` itself."""

import sys

from ptyacc.speed import scaling_check

sys.modules[__name__] = scaling_check
