"""Kept for the old path ``ptyacc.interrupt``: this name is the module ``ptyacc.reconstruction.interrupt`` itself."""

from sys import modules

from ptyacc.reconstruction import interrupt

modules[__name__] = interrupt
