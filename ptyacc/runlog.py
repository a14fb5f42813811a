"""Kept for the old path ``ptyacc.runlog``: this name is the module ``ptyacc.results.runlog`` itself."""

import sys

from ptyacc.results import runlog

sys.modules[__name__] = runlog
