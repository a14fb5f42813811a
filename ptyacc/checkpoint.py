"""Kept for the old path ``ptyacc.checkpoint``: this name is the module ``ptyacc.reconstruction.checkpoint`` itself."""

import sys

from ptyacc.reconstruction import checkpoint

sys.modules[__name__] = checkpoint
