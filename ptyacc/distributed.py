"""Kept for the old path ``ptyacc.distributed``: this name is the module ``ptyacc.reconstruction.distributed`` itself."""

from sys import modules

from ptyacc.reconstruction import distributed

modules[__name__] = distributed
