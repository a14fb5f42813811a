"""Refined quantities in modules of their own (``registry.py``: what a quantity is and how a run
finds it): ``object`` and ``probe`` (the two every model is built with, first: ``build_model``);
``positions`` (offsets of the probe positions and the scan's affine distortion), ``detector_fit``
(the background and intensity weights fitted to the data), ``probe_focus`` (one change of focus
for every probe mode), ``probe_variation`` (a probe that varies
across the scan), ``scans`` (the probes of several scans of one object), ``detector_blur`` (the
detector's point spread) and ``descan_ramp`` (the descan as a phase ramp on each
position's exit wave),
registered on import, in that order (the order in which a model applies them, after the object and
the probe)."""

from ptyacc.quantities import positions, detector_fit, probe_focus, probe_variation, scans, detector_blur, descan_ramp  # noqa: F401, I001  (their factories register, in this order)
from ptyacc.quantities.registry import BuildContext, Quantity, attach_quantities, register, unregister

__all__ = ["BuildContext", "Quantity", "attach_quantities", "register", "unregister"]
