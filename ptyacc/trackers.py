"""Kept for the old path ``ptyacc.trackers``: this name is the module ``ptyacc.watch.trackers`` itself."""

import sys

from ptyacc.watch import trackers

sys.modules[__name__] = trackers
