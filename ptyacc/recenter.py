"""Kept for the old path ``ptyacc.recenter``: this name is the module ``ptyacc.reconstruction.recenter`` itself."""

import sys

from ptyacc.reconstruction import recenter

sys.modules[__name__] = recenter
