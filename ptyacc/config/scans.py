"""The top-level ``scans:`` list: several scans of one object, each overriding the top-level
``data:`` and ``experiment:`` sections key by key (how they become whole configs:
``loading.scan_configs``; how they are reconstructed together: ``ptyacc/quantities/scans.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptyacc.config.fields import _f


@dataclass
class ScanConfig:
    """One scan of several of one object."""

    data: dict[str, Any] = _f(factory=dict, doc="This scan's data section: its keys replace the top-level data's "
                                                "(a path, positions, a transform...).")
    experiment: dict[str, Any] = _f(factory=dict, doc="This scan's experiment section: its keys replace the "
                                                      "top-level experiment's (defocus, tilt, scan step...).")
