"""Kept for the old path ``ptyacc.tracker_images``: this name is the module ``ptyacc.watch.tracker_images`` itself."""

import sys

from ptyacc.watch import tracker_images

sys.modules[__name__] = tracker_images
