"""The calibration autos of the data load (``data/autocalibration.py``) reach the run the way every other auto does
(``reconstruction/autos.py``): named in results.h5's ``auto_values`` and run.log's "auto:" line, and
numbers in their place in the config the model is built from; the parallax measured twice per load (once
on the stored patterns for the orientation, once on the prepared ones for the defocus) and the descan's
shifts worked out once. On a case of the independent simulator (benchmarks/grid/simulate.py) with every
effect that these autos take out: the scan turned by 9 degrees, the patterns transposed, a defocus of
120 Å that the file gives as 96 Å, a descan, dead and hot pixels and a dead column."""

import numpy as np
import pytest
import yaml

import ptyacc
import ptyacc.data.descan as descan_module
import ptyacc.data.parallax as parallax_module
import ptyacc.data.parallax_orientation as parallax_orientation_module
from ptyacc.reconstruction.engine import Reconstructor

CALIBRATION_KEYS = {"experiment.scan_rotation_deg", "experiment.defocus_A", "data.transform.transpose",
                    "data.transform.flip_y", "data.transform.flip_x", "data.bad_pixels", "data.transform.descan",
                    "data.transform.descan_model"}


@pytest.fixture(scope="module")
def every_auto(grid_simulator, tmp_path_factory):
    """The case file, the run built on it with every calibration auto (not iterated) and what it counted:
    {"parallax": measurements of the parallax, "descan_shifts": calls of ``Descan.applied_px``}."""
    setting = grid_simulator.Setting(detector_px=48, scan_shape=(32, 32), scan_step_A=0.4, dose=3e4, defocus_A=120.0,
                                     nominal_defocus_A=96.0, edge_mrad=50.0, seed=5, scan_rotation_deg=9.0,
                                     transpose=True, descan_offset_px=(0.3, -0.2),
                                     descan_px_per_A=((0.04, 0.02), (-0.02, 0.05)), hot_pixels=4, dead_pixels=6,
                                     dead_column=10, write_positions=False)
    work = tmp_path_factory.mktemp("every_auto")
    grid_simulator.write(str(work / "case.h5"), setting)
    config = ptyacc.load_config({
        "data": {"path": str(work / "case.h5"), "bad_pixels": "auto",
                 "transform": {"orientation": "auto", "descan": "auto"}},
        "experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"},
        "output": {"dir": str(work / "out"), "figures": False}, "runtime": {"progress": False}})
    counts = {"parallax": 0, "descan_shifts": 0}
    measure, applied_px = parallax_module.measure, descan_module.Descan.applied_px

    def counted_measure(*args, **kwargs):
        counts["parallax"] += 1
        return measure(*args, **kwargs)

    def counted_applied_px(self, positions_A):
        counts["descan_shifts"] += 1
        return applied_px(self, positions_A)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parallax_module, "measure", counted_measure)
        patch.setattr(parallax_orientation_module, "measure", counted_measure)
        patch.setattr(descan_module.Descan, "applied_px", counted_applied_px)
        run = Reconstructor(config, write=True)
        run.build()
        run.closing.close()
    return work, run, counts


def test_every_calibration_auto_is_named_with_what_the_load_found(every_auto):
    """auto_values holds what the load measured and recorded on its own (the calibration record, results.h5
    /detector), which lies near the simulator's truth; bad pixels and descan by how much they took out."""
    work, run, _ = every_auto
    values, data = yaml.safe_load(run.texts["auto_values"]), run.data
    assert CALIBRATION_KEYS <= set(values)
    assert values["experiment.scan_rotation_deg"] == pytest.approx(data.calibration["scan_rotation_deg"][0], abs=1e-9)
    assert values["experiment.scan_rotation_deg"] == pytest.approx(9.0, abs=1.0)
    assert values["experiment.defocus_A"] == pytest.approx(data.calibration["defocus_A"][0], abs=1e-9)
    assert data.calibration["defocus_A"][1] == "fitted" and values["experiment.defocus_A"] == pytest.approx(120.0, rel=0.08)
    flags = [values[f"data.transform.{name}"] for name in ("transpose", "flip_y", "flip_x")]
    assert flags == [True, False, False] == list(data.detector["orientation_flags"])
    assert values["data.bad_pixels"] == len(data.detector["bad_pixels"]) >= 4 + 48  # the hot ones, the dead column
    assert values["data.transform.descan"] == pytest.approx(float(np.abs(data.detector["descan_px"]).max()))
    assert values["data.transform.descan"] > 0.3
    assert values["data.transform.descan_model"] == "ramp" and bool(data.detector["descan_in_model"])
    lines = [line.split(" ", 1)[1] for line in (work / "out" / "run.log").read_text().splitlines()]
    said = [line.removeprefix("auto: ") for line in lines if line.startswith("auto: ")]
    named = {item.split()[0] for item in said[0].split(", ")}
    assert len(said) == 1 and CALIBRATION_KEYS | {"model.probe_aperture_edge"} <= named


def test_the_model_is_built_from_numbers_in_the_calibration_autos_place(every_auto):
    """The run's config: the rotation and defocus found, the orientation manual with the flags found, the
    descan's model chosen, the nominal C10 gone (defocus_A = -C10 is the one found); the mask and shifts of
    data.bad_pixels and data.transform.descan are the data's (their auto stays)."""
    _, run, _ = every_auto
    values, config = yaml.safe_load(run.texts["auto_values"]), run.config
    assert config.experiment.scan_rotation_deg == values["experiment.scan_rotation_deg"]
    assert config.experiment.defocus_A == values["experiment.defocus_A"] == -run.data.aberrations["C10"]
    assert "C10" not in config.experiment.aberrations
    transform = config.data.transform
    assert (transform.orientation, transform.transpose, transform.flip_y, transform.flip_x) == ("manual", True, False,
                                                                                               False)
    assert transform.descan_model == "ramp" and transform.descan == "auto" and config.data.bad_pixels == "auto"
    assert config.model.probe_aperture_edge == values["model.probe_aperture_edge"] in ("measured", "soft")


def test_the_parallax_is_measured_twice_and_the_descan_worked_out_once(every_auto):
    """Once on the stored patterns (the transpose/flip and rotation), once on the prepared ones (the defocus);
    the orientation's measurement cannot serve for the defocus: on the stored patterns, before the transpose,
    the parallax reads a defocus about 11 % short (WSe2 case of benchmarks/grid/detector_peers.py: 104.8 against
    117.5 A, true 120)."""
    _, _, counts = every_auto
    assert counts == {"parallax": 2, "descan_shifts": 1}
