"""The package's version, in a module of its own so that what records it (results.h5, run.log) need
not import the package's front door; and when the package began to be imported (``IMPORTED_AT``,
``time.perf_counter``), from which run.log counts a run's start-up."""

import time

__version__ = "0.1.0"
IMPORTED_AT = time.perf_counter()  # ``import ptyacc`` imports this first: before torch and the rest
