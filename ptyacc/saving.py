"""Kept for the old path ``ptyacc.saving``: this name is the module ``ptyacc.reconstruction.saving`` itself."""

import sys

from ptyacc.reconstruction import saving

sys.modules[__name__] = saving
