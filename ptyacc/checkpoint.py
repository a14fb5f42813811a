"""Kept for the old path ``ptyacc.checkpoint``: this name is the module ``ptyacc.reconstruction.checkpoint`` itself."""

from sys import modules

from ptyacc.reconstruction import checkpoint

modules[__name__] = checkpoint
