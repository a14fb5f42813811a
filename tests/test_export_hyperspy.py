"""`ptyacc export`: the object and probe as HyperSpy (.hspy) and EMD (.emd) files, read back with
RosettaSciIO's own readers: values and each axis' calibration (name, unit, scale, offset) kept."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rsciio")


def saved_results(tmp_path, xray: bool = False):
    import yaml

    from ptyacc.results.h5file import Results, save_results

    rng = np.random.default_rng(5)
    obj = (rng.uniform(0.5, 1, (1, 3, 10, 12)) * np.exp(1j * rng.uniform(-2, 2, (1, 3, 10, 12)))).astype(np.complex64)
    probe = (rng.normal(size=(2, 8, 8)) + 1j * rng.normal(size=(2, 8, 8))).astype(np.complex64)
    config = {"model": {"slice_thickness_A": 2.5}, "experiment": {"radiation": "xray" if xray else "electron"}}
    results = Results(object=obj, probe=probe, positions_A=np.zeros((1, 2)), loss=np.ones(2), dx_A=0.4,
                      origin_A=(-3.0, 1.5), attrs={"config": yaml.safe_dump(config)})
    save_results(tmp_path / "results.h5", results)
    return obj, probe


@pytest.mark.parametrize("fmt", ["hspy", "emd"])
def test_export_round_trip_keeps_values_and_calibration(tmp_path, fmt):
    import importlib

    from click.testing import CliRunner

    from ptyacc.commands.cli import cli

    obj, probe = saved_results(tmp_path)
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "results.h5"), "-o", str(tmp_path / "x"), "--format", fmt])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == sorted(f"{n}.{fmt}" for n in ("object", "object_phase",
                                                                                                "probe"))
    reader = importlib.import_module(f"rsciio.{fmt}").file_reader

    def read(name):
        signal = reader(str(tmp_path / "x" / f"{name}.{fmt}"))[0]
        return signal["data"], {axis["name"]: (axis["units"], axis["scale"], axis["offset"], axis["size"])
                                for axis in signal["axes"]}
    data, axes = read("object")
    np.testing.assert_array_equal(data, obj[0])
    assert axes["z"] == ("nm", pytest.approx(0.25), pytest.approx(0.0), 3)
    assert axes["y"] == ("nm", pytest.approx(0.04), pytest.approx(-0.3), 10)
    assert axes["x"] == ("nm", pytest.approx(0.04), pytest.approx(0.15), 12)
    data, axes = read("object_phase")
    np.testing.assert_allclose(data, np.angle(obj[0]).sum(0), rtol=1e-6, atol=1e-6)
    assert axes["x"] == ("nm", pytest.approx(0.04), pytest.approx(0.15), 12)
    data, axes = read("probe")
    np.testing.assert_array_equal(data, probe)
    assert axes["y"] == ("nm", pytest.approx(0.04), pytest.approx(-0.16), 8) and axes["mode"][-1] == 2


def test_xray_results_are_exported_in_micrometres(tmp_path):
    from rsciio.hspy import file_reader

    from ptyacc.results.h5file import load_results
    from ptyacc.results.hyperspy import export_hyperspy

    saved_results(tmp_path, xray=True)
    export_hyperspy(load_results(tmp_path / "results.h5"), tmp_path, ("hspy",))
    axes = {a["name"]: a for a in file_reader(str(tmp_path / "object.hspy"))[0]["axes"]}
    assert axes["x"]["units"] == "µm" and axes["x"]["scale"] == pytest.approx(0.4e-4)
