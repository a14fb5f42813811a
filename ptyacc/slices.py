"""Kept for the old path ``ptyacc.slices``: this name is the module ``ptyacc.reconstruction.slices`` itself."""

from sys import modules

from ptyacc.reconstruction import slices

modules[__name__] = slices
