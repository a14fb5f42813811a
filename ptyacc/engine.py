"""Kept for the old path ``ptyacc.engine``: this name is the module ``ptyacc.reconstruction.engine`` itself."""

import sys

from ptyacc.reconstruction import engine

sys.modules[__name__] = engine
