"""Kept for the old path ``ptyacc.distributed``: this name is the module ``ptyacc.reconstruction.distributed`` itself."""

import sys

from ptyacc.reconstruction import distributed

sys.modules[__name__] = distributed
