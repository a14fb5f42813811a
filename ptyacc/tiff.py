"""Kept for the old path ``ptyacc.tiff``: this name is the module ``ptyacc.results.tiff`` itself."""

from sys import modules

from ptyacc.results import tiff

modules[__name__] = tiff
