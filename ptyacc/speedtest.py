"""Kept for the old path ``ptyacc.speedtest``: this name is the module ``ptyacc.speed.speedtest`` itself."""

from sys import modules

from ptyacc.speed import speedtest

modules[__name__] = speedtest
