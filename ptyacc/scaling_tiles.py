"""Kept for the old path ``ptyacc.scaling_tiles``: this name is the module ``ptyacc.speed.scaling_tiles`` itself."""

import sys

from ptyacc.speed import scaling_tiles

sys.modules[__name__] = scaling_tiles
