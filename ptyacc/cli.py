"""Kept for the old path ``ptyacc.cli``: this name is the module ``ptyacc.commands.cli`` itself."""

import sys

from ptyacc.commands import cli

sys.modules[__name__] = cli
