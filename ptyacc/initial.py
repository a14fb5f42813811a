"""Kept for the old path ``ptyacc.initial``: this name is the module ``ptyacc.reconstruction.initial`` itself."""

import sys

from ptyacc.reconstruction import initial

sys.modules[__name__] = initial
