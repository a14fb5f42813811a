"""Kept for the old path ``ptyacc.quality``: this name is the module ``ptyacc.results.quality`` itself."""

import sys

from ptyacc.results import quality

sys.modules[__name__] = quality
