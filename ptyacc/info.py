"""`ptyacc info`: what this machine offers, and what a config will do with its data."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np


def environment_report() -> list[str]:
    """Versions, devices (MIG slices marked), the backend `auto` would pick, accelerate config."""
    import torch

    from ptyacc.distributed import choose_backend, resolve_device
    from ptyacc.output import versions

    lines = ["versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
             f"platform: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, "
             f"torch threads {torch.get_num_threads()}"]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            name = torch.cuda.get_device_name(i)
            memory = torch.cuda.get_device_properties(i).total_memory / 2**30
            lines.append(f"cuda:{i}: {name}, {memory:.0f} GiB" + (" (MIG slice: one process only)" if "MIG" in name else ""))
    else:
        lines.append("cuda: no GPU visible to torch")
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    lines.append(f"mps: {'available' if mps else 'not available'}")
    device = resolve_device("auto")
    lines.append(f"runtime.device auto -> {device}; runtime.backend auto -> {choose_backend('auto', device)} "
                 "(for several processes)")
    lines.append(f"accelerate config: {_accelerate_config() or 'none found (run `accelerate config`)'}")
    return lines


def _accelerate_config() -> str | None:
    try:
        from accelerate.commands.config import default_config_file
    except ImportError:
        return None
    path = Path(default_config_file)
    return str(path) if path.is_file() else None


def data_report(config) -> list[str]:
    """Derived sampling and geometry for the config's data, with warnings where they do not fit."""
    from ptyacc.data import load_data
    from ptyacc.geometry import ObjectGeometry
    from ptyacc.physics import stem_probe

    data = load_data(config)
    k = data.detector_px
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, k, config.model.object_padding_px)
    lines = [f"data: {data.source}: {data.n_patterns} patterns of {k} x {k} px"
             + (f", scan {data.scan_shape[0]} x {data.scan_shape[1]}" if data.scan_shape else ""),
             f"wavelength {data.wavelength_A:.6g} A; dk {data.dk_invA:.6g} 1/A; dx {data.dx_A:.6g} A; "
             f"probe window {k * data.dx_A:.4g} A",
             f"object {geometry.shape[0]} x {geometry.shape[1]} px = {geometry.shape[0] * data.dx_A:.4g} x "
             f"{geometry.shape[1] * data.dx_A:.4g} A",
             f"mean counts per pattern {data.mean_intensity:.6g}"]
    warnings = []
    if data.semiangle_mrad:
        k_max = data.semiangle_mrad * 1e-3 / data.wavelength_A
        radius_px = k_max / data.dk_invA
        lines.append(f"bright-field disk radius {radius_px:.2f} px (semi-angle {data.semiangle_mrad:g} mrad)")
        if radius_px > k / 2:
            warnings.append("the bright-field disk is larger than the detector: check dk_invA or semiangle_mrad")
        probe = stem_probe(k, data.dk_invA, data.wavelength_A, data.semiangle_mrad, data.aberrations).numpy()
        intensity = np.abs(probe) ** 2
        c = np.arange(k) - k // 2
        r = np.hypot(c[:, None], c[None, :])
        outside = intensity[r > 0.45 * k].sum()
        lines.append(f"probe: {100 * outside:.1f}% of its intensity lies near the window edge (r > 0.45 K)")
        if outside > 0.05:
            warnings.append("the probe does not fit in the window: more than 5% of it is near the edge "
                            "(less defocus, or a larger detector crop)")
    step = np.median(np.linalg.norm(np.diff(data.positions_A, axis=0), axis=1)) if data.n_patterns > 1 else 0.0
    lines.append(f"median step between consecutive positions {step:.4g} A = {step / data.dx_A:.3g} px")
    if step > k * data.dx_A / 2:
        warnings.append("positions are more than half a window apart: the probes barely overlap")
    return lines + [f"warning: {w}" for w in warnings]
