"""Kept for the old path ``ptyacc.slices``: this name is the module ``ptyacc.reconstruction.slices`` itself."""

import sys

from ptyacc.reconstruction import slices

sys.modules[__name__] = slices
