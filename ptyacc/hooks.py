"""Kept for the old path ``ptyacc.hooks``: this name is the module ``ptyacc.reconstruction.hooks`` itself."""

from sys import modules

from ptyacc.reconstruction import hooks

modules[__name__] = hooks
