"""Kept for the old path ``ptyacc.model``: this name is the module ``ptyacc.reconstruction.model`` itself."""

import sys

from ptyacc.reconstruction import model

sys.modules[__name__] = model
