"""Kept for the old path ``ptyacc.init_config``: this name is the module ``ptyacc.commands.init_config`` itself."""

from sys import modules

from ptyacc.commands import init_config

modules[__name__] = init_config
