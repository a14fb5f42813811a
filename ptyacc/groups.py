"""Kept for the old path ``ptyacc.groups``: this name is the module ``ptyacc.reconstruction.groups`` itself."""

from sys import modules

from ptyacc.reconstruction import groups

modules[__name__] = groups
