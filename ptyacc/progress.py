"""Kept for the old path ``ptyacc.progress``: this name is the module ``ptyacc.watch.progress`` itself."""

import sys

from ptyacc.watch import progress

sys.modules[__name__] = progress
