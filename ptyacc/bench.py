"""Kept for the old path ``ptyacc.bench``: this name is the module ``ptyacc.speed.bench`` itself."""

import sys

from ptyacc.speed import bench

sys.modules[__name__] = bench
