"""Kept for the old path ``ptyacc.saving``: this name is the module ``ptyacc.reconstruction.saving`` itself."""

from sys import modules

from ptyacc.reconstruction import saving

modules[__name__] = saving
