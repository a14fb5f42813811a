"""Kept for the old path ``ptyacc.groups``: this name is the module ``ptyacc.reconstruction.groups`` itself."""

import sys

from ptyacc.reconstruction import groups

sys.modules[__name__] = groups
