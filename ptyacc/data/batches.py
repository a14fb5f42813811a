"""Kept for the old path ``ptyacc.data.batches``: this name is the module ``ptyacc.data.store`` itself,
which holds the batches dataset beside the pattern store it reads."""

from sys import modules

from ptyacc.data import store

modules[__name__] = store
