"""Kept for the old path ``ptyacc.initial``: this name is the module ``ptyacc.reconstruction.initial`` itself."""

from sys import modules

from ptyacc.reconstruction import initial

modules[__name__] = initial
