"""Kept for the old path ``ptyacc.validation``: this name is the module ``ptyacc.reconstruction.validation`` itself."""

from sys import modules

from ptyacc.reconstruction import validation

modules[__name__] = validation
