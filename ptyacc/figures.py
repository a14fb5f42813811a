"""Kept for the old path ``ptyacc.figures``: this name is the module ``ptyacc.results.figures`` itself."""

import sys

from ptyacc.results import figures

sys.modules[__name__] = figures
