"""Kept for the old path ``ptyacc.outdir``: this name is the module ``ptyacc.results.outdir`` itself."""

from sys import modules

from ptyacc.results import outdir

modules[__name__] = outdir
