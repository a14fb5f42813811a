"""Kept for the old path ``ptyacc.engine``: this name is the module ``ptyacc.reconstruction.engine`` itself."""

from sys import modules

from ptyacc.reconstruction import engine

modules[__name__] = engine
