"""Kept for the old path ``ptyacc.trackers``: this name is the module ``ptyacc.watch.trackers`` itself."""

from sys import modules

from ptyacc.watch import trackers

modules[__name__] = trackers
