"""Kept for the old path ``ptyacc.exchange``: this name is the module ``ptyacc.reconstruction.exchange`` itself."""

import sys

from ptyacc.reconstruction import exchange

sys.modules[__name__] = exchange
