"""The state of the propagation between multislice slices: the slice thickness and the beam's
tilt against the crystal (``experiment.tilt_mrad``, ``model.tilt``), fixed or refined, and the
propagator they make at every forward pass (``tilted_propagator``; the convention is in
ptyacc/physics/tilt.py).

A refined quantity is a parameter from construction on and enters every forward pass, refined
or not yet (DESIGN rule 2): its group delays it by not stepping. Per-position tilts are smoothed
over neighbouring positions after every iteration (``TiltSmoothing``), identically on every
process. ``SlicePropagation.groups`` says how they are refined (``optim.lr.tilt``,
``optim.start.tilt``, ``optim.lr.slice_thickness``, ``optim.start.slice_thickness``,
``model.tilt_smoothing_A``); results.h5 keeps ``/tilt_mrad`` and the attribute ``slice_thickness_A``.
The model holds it as ``model.propagation`` (not among ``model.quantities``: it makes the
propagator between slices, which no other quantity does).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ptyacc.optim.groups import ParameterGroup, clamp
from ptyacc.physics import spatial_frequencies
from ptyacc.physics.footprint import median_neighbour_distance
from ptyacc.physics.tilt import tilted_propagator


class SlicePropagation(nn.Module):
    """Slice thickness and tilt, and the propagator (K, K) or (B, K, K) they make.

    Parameters, or buffers when not refined:
    - slice_thickness_A: () float32, the distance between slices in Å
    - tilt_mrad: (2,) float32 [y, x] mrad, the tilt of the whole scan
    - tilt_offsets_mrad: (N, 2) float32, with ``per_position`` only: each position's tilt minus
      ``tilt_mrad``. Split so that the common tilt learns from every pattern's gradient (one
      pattern alone constrains its tilt poorly) and the offsets only the variation, kept at
      zero mean and smooth (``TiltSmoothing``).
    Buffers: ky_invA, kx_invA (K,) float64 spatial frequencies (1/Å), unshifted layout.
    """

    def __init__(self, window: int, dx_A: float, wavelength_A: float, thickness_A: float,
                 tilt_mrad: tuple[float, float], n_positions: int, per_position: bool = False,
                 refine_tilt: bool = False, refine_thickness: bool = False) -> None:
        super().__init__()
        self.wavelength_A, self.dx_A = wavelength_A, dx_A
        self.per_position = per_position
        freqs = spatial_frequencies(window, dx_A)
        self.register_buffer("ky_invA", freqs)
        self.register_buffer("kx_invA", freqs.clone())
        thickness = torch.tensor(float(thickness_A), dtype=torch.float32)
        _state(self, "tilt_mrad", torch.tensor(tilt_mrad, dtype=torch.float32), refine_tilt)
        if per_position:
            _state(self, "tilt_offsets_mrad", torch.zeros(n_positions, 2), refine_tilt)
        _state(self, "slice_thickness_A", thickness, refine_thickness)

    @torch.no_grad()
    def start_from(self, tilt_mrad: np.ndarray | None, thickness_A: float | None) -> None:
        """Take a previous run's tilts ((2,) or (N, 2), ``/tilt_mrad``) and slice thickness, where
        it saved them (``model.init_from``): per-position tilts become the common tilt (their
        mean) plus offsets, or only their mean for a global tilt."""
        if thickness_A is not None:
            self.slice_thickness_A.fill_(float(thickness_A))
        if tilt_mrad is None:
            return
        tilts = torch.as_tensor(np.asarray(tilt_mrad), dtype=torch.float32, device=self.tilt_mrad.device)
        common = tilts.reshape(-1, 2).mean(0)
        self.tilt_mrad.copy_(common)
        if self.per_position and tilts.dim() == 2 and tilts.shape == self.tilt_offsets_mrad.shape:
            self.tilt_offsets_mrad.copy_(tilts - common)

    def tilts(self) -> torch.Tensor:
        """The tilts (2,), or (N, 2) one per position, [y, x] mrad."""
        return self.tilt_mrad + self.tilt_offsets_mrad if self.per_position else self.tilt_mrad

    def common(self) -> torch.Tensor:
        """The propagator (K, K) complex64 of the common tilt (without per-position offsets)."""
        return tilted_propagator(self.ky_invA, self.kx_invA, self.wavelength_A, self.slice_thickness_A, self.tilt_mrad)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        """Propagator (K, K) complex64, or (B, K, K) for per-position tilts of ``indices`` (B,)."""
        tilt = self.tilt_mrad + self.tilt_offsets_mrad[indices] if self.per_position else self.tilt_mrad
        return tilted_propagator(self.ky_invA, self.kx_invA, self.wavelength_A, self.slice_thickness_A, tilt)

    def groups(self, config, model) -> list[ParameterGroup]:
        """The refined tilt (its per-position offsets smoothed over neighbouring ``model`` positions after every
        iteration) and slice thickness (kept above a hundredth of its start), if any."""
        opt, groups = config.optim, []
        tilt, thickness = self.tilt_mrad, self.slice_thickness_A
        if isinstance(tilt, nn.Parameter):
            tilts, smooth = [tilt], None
            if self.per_position:
                sigma_A = config.model.tilt_smoothing_A
                sigma_px = (sigma_A / self.dx_A if sigma_A is not None
                            else 2 * median_neighbour_distance(model.positions_px.cpu().numpy()))
                smoothing, offsets = TiltSmoothing(model.positions_px, sigma_px), self.tilt_offsets_mrad
                tilts.append(offsets)
                smooth = lambda: smoothing(offsets)  # noqa: E731
            groups.append(ParameterGroup("tilt", tilts, opt.lr.tilt, opt.start.tilt, after_iteration=smooth))
        if isinstance(thickness, nn.Parameter):
            floor_A = 0.01 * config.model.slice_thickness_A
            groups.append(ParameterGroup("slice_thickness", [thickness], opt.lr.slice_thickness
                                         * config.model.slice_thickness_A, opt.start.slice_thickness,
                                         after_step=lambda: clamp(thickness, floor_A, None)))
        return groups


def _state(module: nn.Module, name: str, value: torch.Tensor, refined: bool) -> None:
    """``value`` as a parameter of ``module`` when ``refined``, else as a buffer."""
    if refined:
        module.register_parameter(name, nn.Parameter(value))
    else:
        module.register_buffer(name, value)


class TiltSmoothing:
    """Per-position tilt offsets (N, 2) replaced by their Gaussian-weighted mean over
    neighbouring positions (standard deviation ``sigma_px``, cut at 3 sigma), less their mean
    over all positions, in place: a tilt varies slowly across a crystal, and the common part
    belongs to the global tilt. The weights are a sparse (N, N) matrix made once from the
    positions (N, 2) px; rows sum to 1."""

    def __init__(self, positions_px: torch.Tensor, sigma_px: float, chunk: int = 2048) -> None:
        points = positions_px.double().cpu()
        rows, cols, values = [], [], []
        for start in range(0, len(points), chunk):  # chunks bound the (chunk, N) distance matrix
            distance = torch.cdist(points[start:start + chunk], points)
            near = (distance <= 3 * sigma_px).nonzero()
            weight = torch.exp(-0.5 * (distance[near[:, 0], near[:, 1]] / sigma_px) ** 2)
            rows.append(near[:, 0] + start)
            cols.append(near[:, 1])
            values.append(weight)
        rows, cols, values = torch.cat(rows), torch.cat(cols), torch.cat(values)
        totals = torch.zeros(len(points), dtype=torch.float64).index_add_(0, rows, values)
        self.weights = torch.sparse_coo_tensor(torch.stack([rows, cols]), values / totals[rows],
                                               (len(points), len(points)), check_invariants=True).coalesce()

    @torch.no_grad()
    def __call__(self, offsets: torch.Tensor) -> None:
        smooth = torch.sparse.mm(self.weights.to(offsets.device), offsets.double())
        offsets.copy_((smooth - smooth.mean(0)).to(offsets.dtype))
