"""Kept for the old path ``ptyacc.recenter``: this name is the module ``ptyacc.reconstruction.recenter`` itself."""

from sys import modules

from ptyacc.reconstruction import recenter

modules[__name__] = recenter
