"""Kept for the old path ``ptyacc.geometry``: this name is the module ``ptyacc.physics.geometry`` itself."""

from sys import modules

from ptyacc.physics import geometry

modules[__name__] = geometry
