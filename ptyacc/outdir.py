"""Kept for the old path ``ptyacc.outdir``: this name is the module ``ptyacc.results.outdir`` itself."""

import sys

from ptyacc.results import outdir

sys.modules[__name__] = outdir
