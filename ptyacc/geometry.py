"""Kept for the old path ``ptyacc.geometry``: this name is the module ``ptyacc.reconstruction.geometry`` itself."""

import sys

from ptyacc.reconstruction import geometry

sys.modules[__name__] = geometry
