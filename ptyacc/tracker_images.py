"""Kept for the old path ``ptyacc.tracker_images``: this name is the module ``ptyacc.watch.tracker_images`` itself."""

from sys import modules

from ptyacc.watch import tracker_images

modules[__name__] = tracker_images
