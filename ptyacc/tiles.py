"""Kept for the old path ``ptyacc.tiles``: this name is the module ``ptyacc.reconstruction.tiles`` itself."""

import sys

from ptyacc.reconstruction import tiles

sys.modules[__name__] = tiles
