"""Kept for the old path ``ptyacc.model``: this name is the module ``ptyacc.reconstruction.model`` itself."""

from sys import modules

from ptyacc.reconstruction import model

modules[__name__] = model
