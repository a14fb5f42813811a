"""Kept for the old path ``ptyacc.validation``: this name is the module ``ptyacc.reconstruction.validation`` itself."""

import sys

from ptyacc.reconstruction import validation

sys.modules[__name__] = validation
