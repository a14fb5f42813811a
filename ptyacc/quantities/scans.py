"""Several scans of one object (the config's top-level ``scans:``): a focal series, scans at
different rotations, a scan repeated after a drift.

Each scan is read, calibrated and prepared by its own whole config (``config.loading.scan_configs``:
the top-level config with the scan's ``data`` and ``experiment`` keys in place), autos included.
The scans then become one dataset: their patterns and positions one after the other, scan 0's
first (``combined``). One object is shared by all scans; each scan has its own probe, made from
its own optics and scaled to its own counts (``ScanProbes``: the model's ``probe`` parameter is
scan 0's, the others are this module's parameter), and its own positions (every position has its
own offset when positions are refined). Batches draw from all scans alike. Every scan's probe is
stepped as scan 0's (``ScanProbes.groups``), and the object's preconditioner lights each position
with its own scan's probe (``illumination`` in ``ptyacc/optim/descent.py``): scans of very
different counts may come in any order (docs/how-to/several-scans.md). The object's preconditioned step
is divided by the number of scans (``count``, read by ``quantities/object.py``): an iteration over
every scan moves the object as far as over one. Each pattern carries its scan's share of the scans' counts
of the Poisson loss's floor (``floor_share``): together the scans carry one scan's.

What must match: the radiation, the wavelength and the object pixel dx_A (the patterns' width K
and reciprocal pixel), within 1e-6 relative: the object has one grid, and a multislice step one
wavelength. Scans at different energies or magnifications need resampling, which is not done here.
Where the scans' positions are in one frame (a focal series on one stage) nothing else is needed;
a scan shifted against the others is found by position refinement only if the shift is small.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ptyacc.config import Config
from ptyacc.config.loading import scan_configs
from ptyacc.data import PtychoData, load_data
from ptyacc.data.autocalibration import ScansCalibration
from ptyacc.errors import ConfigError
from ptyacc.optim.groups import ParameterGroup
from ptyacc.quantities.probe import orthogonalize, stepped_as_the_probe
from ptyacc.quantities.registry import BuildContext, Quantity, register

MATCH = 1e-6  # relative tolerance of what the scans must share


@dataclass
class Scan:
    """One scan: its whole config, its data and the rows [start, stop) of its positions in the combined data."""

    config: Config
    data: PtychoData
    start: int
    stop: int


def load_scans(config: Config, device: torch.device | str = "cpu") -> tuple[PtychoData, list[Scan]]:
    """The combined dataset of ``config.scans`` (every pattern in memory) and each scan."""
    scans, start = [], 0
    for number, whole in enumerate(scan_configs(config)):
        if whole.data.transform.descan_model == "auto":  # the descan's ramp takes one scan (quantities/descan_ramp.py)
            whole = dataclasses.replace(whole, data=dataclasses.replace(whole.data, transform=dataclasses.replace(
                whole.data.transform, descan_model="shift")))
        data = load_data(dataclasses.replace(whole, data=dataclasses.replace(whole.data, hold="device")), device=device)
        if data.streamed is not None:
            raise ConfigError(f"scans[{number}].data: several scans are held in memory; this one does not fit")
        scans.append(Scan(whole, data, start, start + data.n_patterns))
        start += data.n_patterns
    check_scans_match([scan.data for scan in scans])
    return combined([scan.data for scan in scans]), scans


def check_scans_match(datas: list[PtychoData]) -> None:
    """Stop with the first scan whose radiation, wavelength, object pixel or pattern width differs from scan 0's."""
    first = datas[0]
    for number, data in enumerate(datas[1:], start=1):
        for name, mine, theirs in (("wavelength_A", data.wavelength_A, first.wavelength_A),
                                   ("dx_A", data.dx_A, first.dx_A), ("detector_px", data.detector_px, first.detector_px)):
            if abs(mine - theirs) > MATCH * abs(theirs):
                raise ConfigError(f"scans[{number}]: {name} {mine:.6g} differs from scan 0's {theirs:.6g}; the scans of "
                                  "one object must share the wavelength, the object pixel and the pattern width "
                                  "(docs/how-to/varying-probe-and-scans.md, 'Several scans')")
        if data.radiation != first.radiation:
            raise ConfigError(f"scans[{number}]: radiation {data.radiation} differs from scan 0's {first.radiation}")


def combined(datas: list[PtychoData]) -> PtychoData:
    """One dataset of the scans ``datas``, one after the other: scan 0's calibration and
    detector, the patterns counted only where every scan's mask counts them, every scan's record of its
    calibration autos (``ScansCalibration``: their values named ``scans[i].<key>``)."""
    first = datas[0]
    masks = [d.mask for d in datas if d.mask is not None]
    mask = torch.stack(masks).all(0) if masks else None
    return dataclasses.replace(
        first, patterns=torch.cat([d.patterns for d in datas]),
        positions_A=np.concatenate([d.positions_A for d in datas]), scan_shape=None, pattern_rows=None,
        source=" + ".join(d.source for d in datas), mask=mask, ground_truth={}, hold=None, streamed=None,
        overrides=tuple(f"scan {i}: {line}" for i, d in enumerate(datas) for line in d.overrides),
        checks=tuple(f"scan {i}: {line}" for i, d in enumerate(datas) for line in d.checks),
        autocalibration=ScansCalibration(tuple(d.autocalibration for d in datas)))


class ScanProbes(Quantity):
    """The probes of scans 1 .. S-1 (scan 0's is the model's ``probe``), a ``Quantity``.

    Parameters
    - modes: (S - 1, P, K, K, 2) float32, real and imaginary parts divided by the model's
      ``probe_scale`` (as the probe's are)
    Buffers: scan_of_position (N,) long, the scan of every position."""

    name = "scans"

    def __init__(self, probes: torch.Tensor, scan_of_position: torch.Tensor, probe_scale: torch.Tensor,
                 counts: torch.Tensor | None = None) -> None:
        """``counts`` (S,): each scan's mean counts per pattern (None: equal)."""
        super().__init__()
        self.modes = nn.Parameter(torch.view_as_real(probes.to(torch.complex64) / probe_scale).contiguous())
        self.register_buffer("scan_of_position", scan_of_position.long())
        counts = torch.ones(1 + len(probes)) if counts is None else counts.double()
        self.register_buffer("floor_shares", (counts / counts.sum()).float(), persistent=False)

    @property
    def count(self) -> int:
        """S, the number of scans (scan 0's included)."""
        return 1 + self.modes.shape[0]

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """(B, P, K, K) complex: the probe modes of the scan of each position of ``indices`` (B,),
        ``probe`` (P, K, K) being scan 0's."""
        return self.every_probe(probe, probe_scale)[self.scan_of_position[indices]]

    def floor_share(self, indices: torch.Tensor) -> torch.Tensor:
        """(B,) float32: the share of the loss's floor of each pattern of ``indices`` (B,), its scan's share of the
        scans' counts: the scans together carry the floor that one scan with their summed counts carries, so that
        two scans of half the counts each lose no more of a faint dark field to it than that one scan
        (benchmarks/records/2026-12-02-two-scans-mos2.md)."""
        return self.floor_shares[self.scan_of_position[indices]]

    def every_probe(self, probe: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """(S, P, K, K) complex: every scan's probe modes, ``probe`` (P, K, K) being scan 0's."""
        return torch.cat([probe[None], torch.view_as_complex(self.modes) * probe_scale])

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        """The probes of scans 1.., stepped as the probe is (``probe.stepped_as_the_probe``: Adam, or the
        least-squares step where ``priors`` chose the preconditioned probe; its start; orthogonal modes): a scan's probe that took
        Adam's small steps beside scan 0's least-squares ones would lag behind it, and its scan's counts with it."""
        modes = self.modes.shape[1]
        orthogonal = config.model.orthogonalize_probe and modes > 1
        group = ParameterGroup("scan_probes", [self.modes], config.optim.lr.probe, config.optim.start.probe,
                               after_iteration=(lambda: [orthogonalize(p) for p in self.modes]) if orthogonal else None)
        return [stepped_as_the_probe(group, config, priors, float(model.probe_scale))]

    def saved(self, model) -> dict[str, np.ndarray]:
        """results.h5's group ``scans``: ``probes`` (S, P, K, K) complex64 and ``scan_of_position`` (N,) int64."""
        with torch.no_grad():
            every = self.every_probe(model.complex_probe(), model.probe_scale)
            return {"probes": every.cpu().numpy(), "scan_of_position": self.scan_of_position.cpu().numpy()}


@register
def scan_probes(config, model, context: BuildContext) -> ScanProbes | None:
    """The probes of scans 1.. (several scans of one object), each from its own optics at its own counts; the
    model's probe (scan 0's) brought to scan 0's own counts."""
    if context.scans is None:
        return None
    # the model's probe was scaled to the mean counts of all scans together: scan 0's own counts it is (a faint
    # scan 0 beside a bright scan 1 would start many times too bright)
    own = context.scans[0].data.mean_intensity / context.mean_intensity
    with torch.no_grad():
        model.quantities["probe"].modes.mul_(float(np.sqrt(own)))
    others = [context.make_probe(scan.config, scan.data) for scan in context.scans[1:]]
    counts = torch.tensor([float(scan.data.mean_intensity) for scan in context.scans])
    return ScanProbes(torch.stack(others), scan_of_position(context.scans), model.probe_scale, counts)

def scan_of_position(scans: list[Scan]) -> torch.Tensor:
    """(N,) long: the scan of every position of the combined data."""
    return torch.cat([torch.full((scan.stop - scan.start,), number, dtype=torch.long)
                      for number, scan in enumerate(scans)])

