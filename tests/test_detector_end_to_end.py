"""``ptyacc init`` then ``ptyacc run`` on a file holding only what a microscope records (the
independent simulator: a raster turned 9 degrees, transposed patterns, descan, hot and dead pixels,
a dead column, detector blur), against the same run given the true positions and flips."""

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import ptyacc
from ptyacc.commands.cli import cli
from ptyacc.results.quality import best_shift_ncc


def phase_ncc(results_path, truth):
    """Best-shift phase NCC over the scanned region, the run's frame moved onto the truth's by the
    mean of the positions it started from."""
    found = ptyacc.load_results(results_path)
    offset = truth["positions_A"].mean(0) - found.initial_positions_A.mean(0)
    ncc, _ = best_shift_ncc(found.phase, np.asarray(found.origin_A) + offset, truth["dx_A"], truth["positions_A"],
                            truth["phase"], levels=((0.5, 4), (0.1, 4)))
    return ncc


@pytest.mark.slow
def test_init_and_run_reach_the_run_given_the_truth(grid_simulator, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    setting = grid_simulator.Setting(
        detector_px=48, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=60.0, edge_mrad=50.0, seed=5,
        scan_rotation_deg=9.0, transpose=True, descan_offset_px=(0.3, -0.2), descan_px_per_A=((0.04, 0.02), (-0.02, 0.05)),
        hot_pixels=4, dead_pixels=6, dead_column=10, blur_px=0.6, write_positions=False)
    grid_simulator.write("scan.h5", setting)
    with h5py.File("scan.h5") as f:
        truth = {"phase": f["ground_truth/phase"][()].astype(float), "dx_A": float(f.attrs["dx_A"]),
                 "positions_A": f["ground_truth/positions_A"][()]}
    with h5py.File("true_positions.h5", "w") as f:
        f["positions_A"] = truth["positions_A"]
    assert CliRunner().invoke(cli, ["init", "scan.h5"]).exit_code == 0
    given = yaml.safe_load(open("scan.yaml"))
    given["data"]["transform"] = {"transpose": True, "descan": "auto"}
    given["experiment"] = {"positions": {"path": "true_positions.h5", "key": "positions_A"}}
    given["output"]["dir"] = "results/given"
    with open("given.yaml", "w") as f:
        yaml.safe_dump(given, f)
    for name in ("scan.yaml", "given.yaml"):
        run = CliRunner().invoke(cli, ["run", name, "--quiet", "--set", "output.figures=false"])
        assert run.exit_code == 0, run.output
    found, best = phase_ncc("results/scan/results.h5", truth), phase_ncc("results/given/results.h5", truth)
    assert best > 0.6
    assert found >= best - 0.02, (found, best)
