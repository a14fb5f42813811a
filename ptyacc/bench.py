"""Kept for the old path ``ptyacc.bench``: this name is the module ``ptyacc.speed.bench`` itself."""

from sys import modules

from ptyacc.speed import bench

modules[__name__] = bench
