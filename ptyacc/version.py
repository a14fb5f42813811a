"""The package's version, in a module of its own so that what records it (results.h5, run.log) need
not import the package's front door."""

__version__ = "0.1.0"
