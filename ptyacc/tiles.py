"""Kept for the old path ``ptyacc.tiles``: this name is the module ``ptyacc.reconstruction.tiles`` itself."""

from sys import modules

from ptyacc.reconstruction import tiles

modules[__name__] = tiles
