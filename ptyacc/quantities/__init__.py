"""Refined quantities in modules of their own (``registry.py``: what a quantity is and how a run
finds it): ``probe_variation`` (a probe that varies across the scan) and ``scans`` (the probes of
several scans of one object), registered on import."""

from ptyacc.quantities import probe_variation, scans  # noqa: F401  (their factories register)
from ptyacc.quantities.registry import BuildContext, Quantity, attach_quantities, register, unregister

__all__ = ["BuildContext", "Quantity", "attach_quantities", "register", "unregister"]
