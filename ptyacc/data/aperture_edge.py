"""``model.probe_aperture_edge``, decided by one rule for ``run``, ``info`` and each scan's probe: an
electron probe built from the optics (no ``model.probe_init`` file, no ``model.init_from``, a known
semi-angle) and an edge not told soft is read from the mean pattern (model layout: zero frequency
at [0, 0]) where it shows an even bright-field disk of the semi-angle (``physics.aperture.measured_edge``).
Where it shows none, ``auto`` becomes soft (the one-pixel ramp) and ``measured`` is refused."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ptyacc.config import Config
from ptyacc.data.dataset import PtychoData
from ptyacc.errors import ConfigError
from ptyacc.physics.aperture import measured_edge

# run.log's line on model.probe_aperture_edge, and the error where measured finds no disk
EDGE_READ = ("model.probe_aperture_edge: measured ({auto}read from the mean pattern's bright-field disk, "
             "{contrast:.3g} times brighter than a ring just outside it; soft = the ramp)")
EDGE_SOFT = ("model.probe_aperture_edge: soft (auto: the mean pattern shows no even bright-field disk of the "
             "semi-angle; {contrast:.3g} times brighter than a ring just outside it)")
EDGE_REFUSED = ("model.probe_aperture_edge: measured, but the mean pattern shows no even bright-field disk of "
                "experiment.semiangle_mrad ({semiangle:g} mrad; inside it {contrast:.3g} times a ring 2-4 px "
                "outside it): a wrong semi-angle or pixel size? Or set soft")


@dataclass(frozen=True)
class ApertureEdge:
    """The edge decided: ``edge`` measured or soft, the ``aperture`` (K, K) float64 read (unshifted; None:
    the ramp's), the disk's ``contrast`` (inside / outside), and whether the config left it ``auto``."""

    edge: str
    aperture: torch.Tensor | None
    contrast: float
    auto: bool

    def line(self) -> str:
        """run.log's line."""
        return (EDGE_READ if self.aperture is not None else EDGE_SOFT).format(
            auto="auto: " if self.auto else "", contrast=self.contrast)


def may_read_edge(config: Config, data: PtychoData) -> bool:
    """Whether a run needs the mean pattern for the aperture edge: electrons, the edge not told soft, no
    ``model.init_from`` (whose probe replaces the one built)."""
    return (config.model.probe_aperture_edge != "soft" and data.radiation == "electron"
            and config.model.init_from is None)


def aperture_edge(config: Config, data: PtychoData, mean_pattern: torch.Tensor | None) -> ApertureEdge | None:
    """The aperture edge of the probe that ``config`` builds for ``data`` (module docstring) from its
    ``mean_pattern`` (K, K) (None: not read); None where the probe is not built from the optics with an edge
    read (``may_read_edge``, a ``model.probe_init`` file, no semi-angle). A ConfigError where
    ``model.probe_aperture_edge: measured`` finds no disk."""
    edge = config.model.probe_aperture_edge
    if (mean_pattern is None or not may_read_edge(config, data) or config.model.probe_init is not None
            or data.semiangle_mrad is None):
        return None
    read, contrast = measured_edge(mean_pattern, data.wavelength_A, data.semiangle_mrad, data.dk_invA, data.mask)
    if read is None and edge == "measured":
        raise ConfigError(EDGE_REFUSED.format(semiangle=data.semiangle_mrad, contrast=contrast))
    return ApertureEdge("measured" if read is not None else "soft", read, contrast, edge == "auto")
