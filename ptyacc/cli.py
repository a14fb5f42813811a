"""Kept for the old path ``ptyacc.cli``: this name is the module ``ptyacc.commands.cli`` itself."""

from sys import modules

from ptyacc.commands import cli

modules[__name__] = cli
