"""Kept for the old path ``ptyacc.info``: this name is the module ``ptyacc.commands.info`` itself."""

import sys

from ptyacc.commands import info

sys.modules[__name__] = info
