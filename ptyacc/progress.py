"""Kept for the old path ``ptyacc.progress``: this name is the module ``ptyacc.watch.progress`` itself."""

from sys import modules

from ptyacc.watch import progress

modules[__name__] = progress
