"""Kept for the old path ``ptyacc.init_config``: this name is the module ``ptyacc.commands.init_config`` itself."""

import sys

from ptyacc.commands import init_config

sys.modules[__name__] = init_config
