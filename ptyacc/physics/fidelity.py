"""Kept for the old path ``ptyacc.physics.fidelity``: this name is the module ``ptyacc.physics.chain`` itself,
whose last stage the data fidelity now is."""

from sys import modules

from ptyacc.physics import chain

modules[__name__] = chain
