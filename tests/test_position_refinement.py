"""Position refinement on a drifting, jittering scan simulated by the benchmark grid's NumPy
multislice (benchmarks/grid/simulate.py, independent of ptyacc): the file holds the nominal raster,
the probes were 0.02 Å further per row (a slow drift) and 0.15 Å rms off at random. With
``optim.start.positions`` and ``optim.start.scan_affine`` (docs/how-to/tilt-thickness-distortion.md) the refined
positions come within 0.05 Å rms of the truth in 20 iterations."""

import h5py
import numpy as np
import pytest

import ptyacc
from ptyacc.results.quality import placed_ncc

DRIFT_A_PER_ROW = 0.02
JITTER_A = 0.15


def write_scan(simulator, path, monkeypatch, drift_A: float, jitter_A: float, seed: int) -> dict:
    """A 14 x 14 scan of the grid's random atoms (80 kV, 100 Å underfocus, 1e5 electrons per
    pattern) whose probes sat off the nominal raster; the file gives the nominal raster."""
    nominal_raster = simulator.scan_positions_A
    rng = np.random.default_rng(seed + 100)
    where = {}

    def distorted(setting, canvas_A):
        nominal = nominal_raster(setting, canvas_A)
        rows = np.repeat(np.arange(setting.scan_shape[0]), setting.scan_shape[1])
        where["nominal"] = nominal
        where["true"] = nominal + drift_A * rows[:, None] + rng.normal(0.0, jitter_A, nominal.shape)
        return where["true"]

    monkeypatch.setattr(simulator, "scan_positions_A", distorted)
    setting = simulator.Setting(defocus_A=100.0, dose=1e5, scan_shape=(14, 14), seed=seed)
    sim = simulator.simulate(setting)
    with h5py.File(path, "w") as f:
        f["patterns"] = sim["patterns"]
        f["positions_A"] = where["nominal"]
        f.attrs.update(energy_eV=setting.energy_eV, semiangle_mrad=setting.semiangle_mrad,
                       defocus_A=setting.defocus_A, dk_invA=sim["dk_invA"])
    return {"true": where["true"], "nominal": where["nominal"], "phase": sim["phases"].sum(0)}


def rms_A(positions: np.ndarray, true: np.ndarray) -> float:
    """The rms distance (Å) after the common shift, which moves the object alike and is not an error."""
    error = positions - true
    error -= error.mean(0)
    return float(np.sqrt((error**2).sum(1).mean()))


def reconstruct(path, tmp_path, **start) -> ptyacc.Reconstruction:
    config = {"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}},
              "optim": {"iterations": 20, "start": start}, "runtime": {"progress": False},
              "output": {"dir": str(tmp_path / "out")}}
    return ptyacc.reconstruct(ptyacc.load_config(config), write=False)


def phase_ncc(rec: ptyacc.Reconstruction, true_positions: np.ndarray, truth: np.ndarray) -> float:
    """The phase NCC with the truth over the scanned region, the reconstruction placed where its
    positions' common shift from the truth puts it."""
    shift_px = (rec.results.positions_A - true_positions).mean(0) / rec.results.dx_A
    return placed_ncc(rec.results.phase, np.asarray(rec.results.origin_A), rec.results.dx_A, true_positions, truth,
                      shift_px)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 7])
def test_drifting_scan_positions_within_five_hundredths_of_an_angstrom(grid_simulator, tmp_path, monkeypatch, seed):
    scan = write_scan(grid_simulator, tmp_path / "drift.h5", monkeypatch, DRIFT_A_PER_ROW, JITTER_A, seed)
    assert rms_A(scan["nominal"], scan["true"]) > 0.2
    refined = reconstruct(tmp_path / "drift.h5", tmp_path, positions=1, scan_affine=1)
    assert rms_A(refined.results.positions_A, scan["true"]) < 0.05
    if seed:
        return
    # the object as good as from the same atoms scanned without errors
    exact = write_scan(grid_simulator, tmp_path / "exact.h5", monkeypatch, 0.0, 0.0, seed)
    reference = phase_ncc(reconstruct(tmp_path / "exact.h5", tmp_path), exact["true"], exact["phase"])
    assert phase_ncc(refined, scan["true"], scan["phase"]) > reference - 0.003
