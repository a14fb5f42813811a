"""model.probe_aperture_edge: the initial probe's aperture edge read from the data's mean pattern
(physics.aperture.measured_edge), against known edges and against another simulator's sharp one."""

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

import ptyacc
from ptyacc.errors import ConfigError
from ptyacc.physics import aperture, measured_edge, stem_probe
from ptyacc.reconstruction.engine import Reconstructor

N, WAVELENGTH_A, SEMIANGLE_MRAD, DK = 64, 0.0418, 25.0, 0.08


def frequencies() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ky, kx (unshifted, 1/Å) and the distance from the zero frequency in pixels."""
    k = torch.fft.fftfreq(N, d=1.0 / (N * DK), dtype=torch.float64)
    ky, kx = k[:, None], k[None, :]
    return ky, kx, torch.sqrt(ky**2 + kx**2) / DK


def test_a_sharp_and_a_soft_edge_are_read_back_exactly_over_the_scattering_around_them():
    ky, kx, r = frequencies()
    sharp = (r <= SEMIANGLE_MRAD * 1e-3 / WAVELENGTH_A / DK).to(torch.float64)
    soft = aperture(ky, kx, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    assert not torch.equal(sharp, soft)
    for truth in (sharp, soft):
        pattern = 1000.0 * truth**2 + 3.0  # 3 counts scattered everywhere
        values, contrast = measured_edge(pattern, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
        torch.testing.assert_close(values, truth, atol=1e-12, rtol=0)
        assert contrast == pytest.approx(1003.0 / 3.0)


def test_an_edge_between_sharp_and_the_ramp_is_kept_a_broader_one_and_masked_pixels_get_the_ramp():
    """The read edge is kept between a sharp disk and the ramp: halfway between them it is read
    back exactly; blurred beyond the ramp (the object's scattering, the detector) it becomes the
    ramp; bad pixels (mask 0) take the ramp whatever they show."""
    ky, kx, r = frequencies()
    r0 = SEMIANGLE_MRAD * 1e-3 / WAVELENGTH_A / DK
    sharp, soft = (r <= r0).to(torch.float64), aperture(ky, kx, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    halfway = 0.5 * (sharp + soft)
    values, _ = measured_edge(1000.0 * halfway**2 + 3.0, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    torch.testing.assert_close(values, halfway, atol=1e-12, rtol=0)
    blurred = ((r0 - r) / 3.0 + 0.5).clamp(0, 1)  # a 3 px ramp
    values, _ = measured_edge(1000.0 * blurred**2 + 3.0, WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    torch.testing.assert_close(values, soft, atol=1e-12, rtol=0)
    mask = torch.ones(N, N)
    mask[:, :2] = 0  # bad columns through the edge
    values, _ = measured_edge(1000.0 * sharp**2 + 3.0, WAVELENGTH_A, SEMIANGLE_MRAD, DK, mask=mask)
    bad = mask == 0
    assert not torch.equal(sharp[bad], soft[bad])
    torch.testing.assert_close(values[bad], soft[bad], atol=0, rtol=0)
    torch.testing.assert_close(values[~bad], sharp[~bad], atol=0, rtol=0)


def test_a_pattern_without_a_disk_of_the_semi_angle_gives_none():
    flat, contrast = measured_edge(torch.full((N, N), 5.0, dtype=torch.float64), WAVELENGTH_A, SEMIANGLE_MRAD, DK)
    assert flat is None and contrast == pytest.approx(1.0)
    _, _, r = frequencies()
    small = (r <= 4.0).to(torch.float64) * 1000.0 + 1.0  # a disk far smaller than the semi-angle's 7.5 px
    assert measured_edge(small, WAVELENGTH_A, SEMIANGLE_MRAD, DK)[0] is None


@pytest.fixture(scope="module")
def sharp_edged_file(tmp_path_factory, grid_simulator) -> Path:
    """A multislice dataset from the benchmark grid's simulator (NumPy, independent of ptyacc),
    whose probe-forming aperture has a sharp edge, with its true probe."""
    sim = grid_simulator
    path = tmp_path_factory.mktemp("edge") / "sharp.h5"
    sim.write(str(path), sim.Setting(defocus_A=150.0, edge_mrad=110.0, dose=1e5, slices=2, scan_shape=(6, 6), seed=3))
    return path


def initial_probe(path: Path, edge: str, tmp_path: Path) -> tuple[np.ndarray, list[str]]:
    """The first probe mode a run on ``path`` starts from, and run.log's lines on the edge (and, where auto
    decided it, results.h5's auto_values and the run's config name what it decided: the aperture edge is
    resolved with every other auto, before the model is built)."""
    config = ptyacc.load_config({"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}},
                                 "model": {"probe_aperture_edge": edge, "slices": 2, "slice_thickness_A": 8.0},
                                 "output": {"dir": str(tmp_path / edge), "figures": False},
                                 "runtime": {"progress": False}})
    run = Reconstructor(config, write=True)
    run.build()
    run.closing.close()
    said = [line for line in (tmp_path / edge / "run.log").read_text().splitlines() if "model.probe_aperture_edge:" in line]
    decided = yaml.safe_load(run.texts["auto_values"]).get("model.probe_aperture_edge")
    assert decided == ("measured" if edge == "auto" else None)
    assert run.config.model.probe_aperture_edge == (decided or edge)
    return torch.view_as_complex(run.model.probe.detach())[0].numpy(), said


def test_auto_starts_from_the_sharp_edge_another_simulator_used(sharp_edged_file, tmp_path):
    """The soft ramp's probe overlaps the true one by 0.985 at this 110 mrad detector edge (a
    small disk: its edge pixels weigh); read from the data the overlap is 0.999+."""
    with h5py.File(sharp_edged_file) as f:
        truth = f["ground_truth/probe"][()]
    overlap = {}
    for edge in ("auto", "soft"):
        probe, said = initial_probe(sharp_edged_file, edge, tmp_path)
        overlap[edge] = abs(np.vdot(probe, truth)) / np.linalg.norm(probe) / np.linalg.norm(truth)
        assert len(said) == (edge == "auto") and all("measured (auto: read from the mean pattern" in s for s in said)
    assert overlap["soft"] < 0.99 and overlap["auto"] > 0.999, overlap


def test_measured_without_a_disk_is_refused_naming_the_key(sharp_edged_file, tmp_path):
    """A semi-angle far from the data's (so no disk where it says; the calibration check, which
    would refuse it first, off): measured is refused, auto falls back to the ramp and says why."""
    for edge in ("measured", "auto"):
        config = ptyacc.load_config({"data": {"path": str(sharp_edged_file)},
                                     "experiment": {"positions": {"key": "positions_A"}, "semiangle_mrad": 60.0,
                                                    "check_calibration": False},
                                     "model": {"probe_aperture_edge": edge},
                                     "output": {"dir": str(tmp_path / edge), "figures": False},
                                     "runtime": {"progress": False}})
        if edge == "measured":
            refused = r"model.probe_aperture_edge: measured, but the mean pattern shows no even bright-field disk"
            with pytest.raises(ConfigError, match=refused):
                Reconstructor(config, write=False).build()
        else:
            run = Reconstructor(config, write=True)
            run.build()
            run.closing.close()
            assert "model.probe_aperture_edge: soft (auto: the mean pattern shows no even bright-field disk" in \
                (tmp_path / edge / "run.log").read_text()
            assert yaml.safe_load(run.texts["auto_values"])["model.probe_aperture_edge"] == "soft"
            assert run.config.model.probe_aperture_edge == "soft"
            nominal = stem_probe(run.data.detector_px, run.data.dk_invA, run.data.wavelength_A, 60.0, run.data.aberrations)
            probe = torch.view_as_complex(run.model.probe.detach())[0]
            cosine = abs(torch.vdot(probe.flatten(), nominal.flatten())) / probe.norm() / nominal.norm()
            assert float(cosine) > 1 - 1e-5  # the ramp (complex64 rounding)


def test_a_strong_object_on_a_small_scan_does_not_blur_the_edge(tmp_path):
    """ptyacc's own simulator draws its probe with the ramp; a strong object (0.8 rad atoms) on a
    6 x 6 scan spreads the mean pattern's edge past it (read pixel by pixel, the probe overlapped
    the true one by 0.9915), which the read edge must not take for the aperture's (kept between
    sharp and the ramp: 0.99996)."""
    config = ptyacc.load_config({
        "data": {"simulate": {"scan_shape": [6, 6], "detector_px": 16, "atoms": 8, "seed": 2, "atom_phase_rad": 0.8}},
        "experiment": {"energy_eV": 80e3, "semiangle_mrad": 80.0, "dx_A": 0.15, "defocus_A": 30.0, "scan_step_A": 0.3},
        "model": {"slices": 2, "slice_thickness_A": 15.0}, "output": {"dir": str(tmp_path), "figures": False},
        "runtime": {"progress": False}})
    run = Reconstructor(config, write=False)
    run.build()
    probe = torch.view_as_complex(run.model.probe.detach())[0]
    truth = stem_probe(16, run.data.dk_invA, run.data.wavelength_A, 80.0, run.data.aberrations)
    cosine = abs(torch.vdot(probe.flatten(), truth.flatten())) / probe.norm() / truth.norm()
    assert float(cosine) > 1 - 1e-4, float(cosine)


@pytest.mark.parametrize("edge, semiangle", [("auto", None), ("measured", 60.0)])
def test_info_decides_the_edge_as_the_run_does(sharp_edged_file, tmp_path, edge, semiangle):
    """`ptyacc info` on the same config says the run's line on the edge (data/aperture_edge.py's one rule,
    on its sample of the patterns, here all 36), and a measured edge the data refuse as a warning where the
    run stops with the same message."""
    from click.testing import CliRunner

    from ptyacc.commands.cli import cli

    experiment = {"positions": {"key": "positions_A"}, **({"semiangle_mrad": semiangle, "check_calibration": False}
                                                           if semiangle else {})}
    raw = {"data": {"path": str(sharp_edged_file)}, "experiment": experiment,
           "model": {"probe_aperture_edge": edge, "slices": 2, "slice_thickness_A": 8.0},
           "output": {"dir": str(tmp_path / "out"), "figures": False}, "runtime": {"progress": False}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    shown = CliRunner().invoke(cli, ["info", str(path)])
    assert shown.exit_code == 0, shown.output
    said = [line for line in shown.stdout.splitlines() if "model.probe_aperture_edge:" in line]
    if semiangle is None:
        run = Reconstructor(ptyacc.load_config(raw), write=True)
        run.build()
        run.closing.close()
        logged = [line.split(" ", 1)[1] for line in (tmp_path / "out" / "run.log").read_text().splitlines()
                  if "model.probe_aperture_edge:" in line]
        assert said == logged and "measured (auto: read from the mean pattern" in said[0]
    else:
        with pytest.raises(ConfigError) as refused:
            Reconstructor(ptyacc.load_config(raw), write=False).build()
        assert said == [f"warning: {refused.value}"]
