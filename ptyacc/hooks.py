"""Kept for the old path ``ptyacc.hooks``: this name is the module ``ptyacc.reconstruction.hooks`` itself."""

import sys

from ptyacc.reconstruction import hooks

sys.modules[__name__] = hooks
