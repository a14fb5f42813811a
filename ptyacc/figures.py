"""Kept for the old path ``ptyacc.figures``: this name is the module ``ptyacc.results.figures`` itself."""

from sys import modules

from ptyacc.results import figures

modules[__name__] = figures
