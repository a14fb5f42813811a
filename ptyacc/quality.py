"""Kept for the old path ``ptyacc.quality``: this name is the module ``ptyacc.results.quality`` itself."""

from sys import modules

from ptyacc.results import quality

modules[__name__] = quality
