"""The most a varying probe (``model.probe_variation``) can gain on a case: the object reconstructed with each
position's TRUE probe given (issue #53, item 4).

    python benchmarks/varying_probe_ceiling.py DIR CASE MODE [key=value ...]

CASE and the runs as in benchmarks/varying_probe_family.py (a grid case by name, or a file of
benchmarks/varying_probe_mos2.py; the file's positions and mean defocus, 30 or 40 iterations, batch 32). MODE:

- ``off``: one probe, refined (the default); ``off_fixed``: one probe, fixed at its start (the aperture at the
  file's mean defocus: the true mean probe where the simulator's aperture is ptyacc's);
- ``truth``: each position's probe is P_0 propagated by its true defocus less the mean (the file's
  ground_truth/defocus_A) and scaled by the square root of its true current (ground_truth/current, over its
  mean), P_0 refined; ``truth_fixed``: the same with P_0 fixed at its start: every probe the truth's.

``truth`` and ``truth_fixed`` replace ``ProbeVariation.probes`` (one eigen-probe whose weights never step) by the
truth's probes: an oracle for measuring, never a way to run. Prints one JSON line as varying_probe_family.py."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from varying_probe_family import case_config, scored_run  # noqa: E402

from ptyacc.physics.wavelength import electron_wavelength_A  # noqa: E402
from ptyacc.quantities.probe_variation import ProbeVariation  # noqa: E402

MODES = ("off", "off_fixed", "truth", "truth_fixed")


def true_probes(path: Path):
    """``probes`` for ``ProbeVariation``: each position's probe from the file's true defocus and current."""
    with h5py.File(path) as f:
        defocus, current = f["ground_truth/defocus_A"][()], f["ground_truth/current"][()]
        nominal, energy = float(f.attrs["defocus_A"]), float(f.attrs["energy_eV"])
    change = torch.as_tensor(defocus - nominal)  # (N,) Å
    scale = torch.as_tensor(np.sqrt(current / current.mean()))  # (N,)
    wavelength = electron_wavelength_A(energy)

    def probes(self, probe, indices, probe_scale):
        k = probe.shape[-1]
        q = torch.fft.fftfreq(k, d=self.dx_A, dtype=torch.float64)
        q2 = q[:, None] ** 2 + q[None, :] ** 2
        # a probe of defocus f + d is the one of f with its spectrum times exp(+i pi lambda d q^2) (physics/probe.py)
        transfer = torch.exp(1j * math.pi * wavelength * change[indices.cpu()][:, None, None] * q2).to(probe.dtype)
        first = torch.fft.ifft2(torch.fft.fft2(probe[0])[None] * transfer.to(probe.device))
        first = first * scale[indices.cpu()].to(probe.device, torch.float32)[:, None, None]
        # the variation's parameters take part (their steps are 0), as every parameter must
        first = first + 0.0 * (self.weights[indices].sum() + self.amplitudes[indices].sum() + self.eigen.sum())
        first = first[:, None]
        if probe.shape[0] == 1:
            return first
        return torch.cat([first, probe[1:].expand(len(indices), -1, -1, -1)], dim=1)
    return probes


def main() -> None:
    directory, case, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode not in MODES:
        raise SystemExit(f"MODE must be one of {MODES}, got {mode!r}")
    overrides = dict(arg.split("=", 1) for arg in sys.argv[4:])
    config, path, name = case_config(directory, case, {"probe_variation": 0}, mode)
    if mode.endswith("fixed"):
        config["optim"]["start"] = {"probe": None}
    if mode.startswith("truth"):
        config["model"].update(probe_variation=1, probe_variation_check=False, probe_variation_eigen="aberrations")
        config["optim"]["lr"] = {"probe_variation": 0.0, "probe_amplitude": 0.0}
        ProbeVariation.probes = true_probes(path)
    _, scores = scored_run(config, path, overrides)
    print(json.dumps({"case": name, "mode": mode, "set": overrides, **scores}), flush=True)


if __name__ == "__main__":
    main()
