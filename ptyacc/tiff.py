"""Kept for the old path ``ptyacc.tiff``: this name is the module ``ptyacc.results.tiff`` itself."""

import sys

from ptyacc.results import tiff

sys.modules[__name__] = tiff
