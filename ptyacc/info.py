"""Kept for the old path ``ptyacc.info``: this name is the module ``ptyacc.commands.info`` itself."""

from sys import modules

from ptyacc.commands import info

modules[__name__] = info
