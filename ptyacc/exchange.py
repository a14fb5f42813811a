"""Kept for the old path ``ptyacc.exchange``: this name is the module ``ptyacc.reconstruction.exchange`` itself."""

from sys import modules

from ptyacc.reconstruction import exchange

modules[__name__] = exchange
