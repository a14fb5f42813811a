"""Kept for the old path ``ptyacc.runlog``: this name is the module ``ptyacc.results.runlog`` itself."""

from sys import modules

from ptyacc.results import runlog

modules[__name__] = runlog
