"""Kept for the old path ``ptyacc.scaling_tiles``: this name is the module ``ptyacc.speed.scaling_tiles`` itself."""

from sys import modules

from ptyacc.speed import scaling_tiles

modules[__name__] = scaling_tiles
