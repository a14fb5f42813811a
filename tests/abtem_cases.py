"""The abTEM cases of ``tests/data/abtem/`` (``make_cases.py`` there): thick SrTiO3 crystals that
ptyacc did not simulate, and ptyacc's forward model evaluated at their truth.

``truth_misfit`` builds a run from a config as a user would (reader, calibration, positions or
raster, pattern orientation, probe from the optics), replaces the object by the true crystal and
returns how far the predicted patterns are from the data: a convention with the wrong sign
explains the data worse than the right one."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import torch

import ptyacc
from ptyacc.reconstruction.engine import Reconstructor

CASES = Path(__file__).parent / "data" / "abtem"
CELL_THICKNESS_A = 3.905


def case_config(name: str, **sections) -> dict:
    """A config of the case ``name`` (sto_<name>.h5): its positions from the file, one slice per
    unit cell of depth; ``sections`` update it section by section."""
    path = CASES / f"sto_{name}.h5"
    with h5py.File(path) as f:
        cells = f["ground_truth/cell_phase"].shape[0]
    config = {"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}},
              "model": {"slices": cells, "slice_thickness_A": CELL_THICKNESS_A},
              "optim": {"iterations": 1}, "runtime": {"progress": False}}
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    return config


def truth(name: str) -> dict:
    """The case's file positions (N, 2) Å and its truth: one periodic unit cell of the
    projected phase per unit cell of depth (C, K, K), pixel [r, c] at (r dx, c dx)."""
    with h5py.File(CASES / f"sto_{name}.h5") as f:
        k = f["patterns"].shape[-1]
        return {"positions_A": f["positions_A"][()], "cell_phase": f["ground_truth/cell_phase"][:, :k, :k],
                "probe": f["ground_truth/probe"][()],
                "phase": f["ground_truth/phase"][()], **dict(f["ground_truth"].attrs)}


def periodic_sample(cell: np.ndarray, offset_px: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A periodic image (..., K, K) sampled at pixels offset_px (y, x) + (i, j), i < shape[0],
    j < shape[1]: the fractional part by a Fourier shift, the whole part by indexing."""
    k = cell.shape[-1]
    whole = np.floor(offset_px).astype(int)
    fraction = np.asarray(offset_px) - whole
    f = np.fft.fftfreq(k)
    ramp = np.exp(2j * np.pi * (f[:, None] * fraction[0] + f[None, :] * fraction[1]))
    shifted = np.real(np.fft.ifft2(np.fft.fft2(cell) * ramp))
    rows, cols = (whole[0] + np.arange(shape[0])) % k, (whole[1] + np.arange(shape[1])) % k
    return shifted[..., rows[:, None], cols[None, :]]


def truth_misfit(name: str, reverse_slices: bool = False, true_probe: bool = False, **sections) -> float:
    """sum (sqrt(model) - sqrt(data))^2 / sum data over every pattern of the case, the model
    being ptyacc's forward chain (built from ``case_config(name, **sections)``) with the true
    crystal as the object (its slices in reverse order if ``reverse_slices``) and the probe
    from the optics (abTEM's own with ``true_probe``, scaled as ptyacc scaled its probe). The
    crystal is placed by the scan's centre: the positions ptyacc uses (a
    rotated raster, say) keep their centre where the file's are."""
    data = dict(sections.pop("data", {}))  # the truth is on the detector's grid: upsample 1 unless asked
    data["transform"] = {"upsample": 1, **data.get("transform", {})}
    config = ptyacc.load_config(case_config(name, data=data, **sections))
    run = Reconstructor(config, write=False)
    run.build()
    model, geometry, known = run.model, run.geometry, truth(name)
    cells = known["cell_phase"]
    slices = model.object.shape[1]
    if slices != len(cells):
        raise ValueError(f"{name}: {len(cells)} cells of depth, model of {slices} slices")
    if reverse_slices:
        cells = cells[::-1]
    frame_shift_A = known["positions_A"].mean(0) - run.data.positions_A.mean(0)
    offset_px = (np.asarray(geometry.origin_A) + frame_shift_A) / geometry.dx_A
    phase = torch.from_numpy(periodic_sample(cells.astype(np.float64), offset_px, geometry.shape))
    with torch.no_grad():
        model.object.copy_(torch.view_as_real(torch.polar(torch.ones_like(phase), phase)[None].to(torch.complex64)))
        if true_probe:
            mine = model.complex_probe()
            probe = torch.from_numpy(known["probe"])[None] * mine.abs().square().sum().sqrt()
            model.probe.copy_(torch.view_as_real(probe / model.probe_scale))
        predicted = model(torch.arange(run.data.n_patterns)).double()
        measured = run.data.patterns.double()
        misfit = (predicted.sqrt() - measured.sqrt()).square().sum() / measured.sum()
    return float(misfit)
