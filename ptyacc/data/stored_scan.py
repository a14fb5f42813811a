"""A scan that a file stores as positions, read for the autos that need the scan's grid (the scan
rotation, the transpose/flip, the defocus from the parallax): positions that form the nominal raster
(``positions.raster_fit``) become that raster, others are kept (their rotation then turns them about
their centre), and the shape of a raster with jitter is handed to the parallax."""

from __future__ import annotations

import dataclasses

import numpy as np

from ptyacc.config import ExperimentConfig
from ptyacc.data.calibration import SourceFacts
from ptyacc.data.positions import raster_fit


def raster_or_positions(experiment: ExperimentConfig, facts: SourceFacts, scan_shape: list[int] | None,
                        needs: list[str]) -> tuple[ExperimentConfig, SourceFacts, list[int] | None, tuple[str, ...]]:
    """Where the run would take the file's own positions (or those ``experiment.positions`` names) and
    an auto needs the scan (``needs``, the keys: ``experiment.scan_rotation_deg``,
    ``data.transform.orientation`` without basis vectors, ``experiment.defocus_A``): positions that
    form the nominal raster (``positions.raster_fit``) are read as that raster (its shape and step; a
    rotation given turns it on from the raster's own); others are kept, and where they form a raster
    with jitter its shape is given to the parallax. The experiment, the source's facts and the
    data.scan_shape (``scan_shape`` as given) to calibrate with, and what to report (for the terminal
    too)."""
    if facts.named_positions is not None:
        where, given = facts.named_positions
    elif facts.positions_A is not None and experiment.scan_step_A is None and "scan_step_A" not in facts.attrs:
        where, given = f"{facts.name}:positions_A", facts.positions_A
    else:
        return experiment, facts, scan_shape, ()
    given = np.asarray(given, dtype=np.float64)
    if not needs or experiment.radiation != "electron" or given.shape != (facts.n_patterns, 2):
        return experiment, facts, scan_shape, ()  # nothing to measure; calibrate checks the array
    hint = tuple(scan_shape) if scan_shape else facts.scan_shape
    fit = raster_fit(given, hint)
    if fit is not None and hint not in (None, fit.scan_shape):
        fit = None
    asked = ", ".join(f"{key}: auto" for key in needs)
    if fit is not None and fit.exact:
        rotation = experiment.scan_rotation_deg
        if rotation != "auto":
            rotation = (rotation + fit.rotation_deg + 180.0) % 360.0 - 180.0
        experiment = dataclasses.replace(experiment, scan_step_A=fit.step_A, scan_rotation_deg=rotation,
                                         positions="raster")
        facts = dataclasses.replace(facts, attrs=dict(facts.attrs, scan_shape=np.array(fit.scan_shape)),
                                    positions_A=None, named_positions=None)
        return experiment, facts, scan_shape, (
            f"positions: the {len(given)} positions of {where} form {fit.describe()}: read as that raster "
            f"(data.scan_shape {list(fit.scan_shape)}, experiment.scan_step_A {fit.step_A:.6g}), on which {asked} "
            "are measured; the object comes out in the raster's frame",)
    facts = dataclasses.replace(facts, named_positions=(where, given))
    grid = fit is not None  # any raster's grid, skewed or mirrored too: the parallax fits a linear map
    kept = [f"{key}: auto measured at them" for key in needs if key != "experiment.defocus_A"]
    if "experiment.defocus_A" in needs:
        kept.append("experiment.defocus_A: auto measured on the grid of their raster" if grid else
                    "experiment.defocus_A: auto not measured (the parallax needs positions on a raster's grid)")
    line = (f"positions: the {len(given)} positions of {where} are {fit.describe() if fit else 'no raster'}: kept as "
            f"they are ({'; '.join(kept)}; a scan rotation turns them about their centre)")
    return experiment, facts, list(fit.scan_shape) if grid and not scan_shape else scan_shape, (line,)
