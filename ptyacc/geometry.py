"""Kept for the old path ``ptyacc.geometry``: this name is the module ``ptyacc.physics.geometry`` itself."""

import sys

from ptyacc.physics import geometry

sys.modules[__name__] = geometry
