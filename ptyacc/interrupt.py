"""Kept for the old path ``ptyacc.interrupt``: this name is the module ``ptyacc.reconstruction.interrupt`` itself."""

import sys

from ptyacc.reconstruction import interrupt

sys.modules[__name__] = interrupt
