"""The X-ray far-field probe: read from a file (each format, resampled), made from the optics or
from the patterns, the defaults converging without NaN on counted data of a defocused zone-plate
beam simulated with NumPy alone (tests/zone_plate.py), and the scan's overlap measured between
nearest neighbours."""

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

import ptyacc
from ptyacc.errors import ConfigError, DataError
from ptyacc.results.quality import best_shift_ncc

sys.path.insert(0, str(Path(__file__).parent))
import zone_plate  # noqa: E402


@pytest.fixture(scope="module")
def case():
    return zone_plate.simulate()


def config_for(tmp_path, case, probe=None, **sections):
    zone_plate.write_cxi(tmp_path / "zp.cxi", case, probe)
    base = {"data": {"path": str(tmp_path / "zp.cxi")}, "experiment": {"radiation": "xray"},
            "optim": {"batch_size": 5}, "runtime": {"progress": False, "threads": 1}}
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return ptyacc.load_config(base)


def initial_probe(config):
    """The probe of the initial model, (modes, K, K) complex128, and run.log's lines."""
    from ptyacc.data import load_data
    from ptyacc.physics.geometry import ObjectGeometry
    from ptyacc.reconstruction.initial import build_model

    data = load_data(config)
    said = []
    model = build_model(config, data, ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px, 0), said=said)
    return model.complex_probe().detach().to(torch.complex128).numpy(), said, data


def ncc_with_truth(rec, case):
    r = rec.results
    return best_shift_ncc(r.phase, r.origin_A, rec.data.dx_A, rec.data.positions_A, case.phase, levels=((1.0, 2),))[0]


def scaled(probe, counts):
    return probe * np.sqrt(counts / (np.abs(probe) ** 2).sum())


def test_a_probe_file_of_each_format_round_trips_into_the_initial_model(tmp_path, case):
    """.npy, a CXI file's own probe, an HDF5 compound of (real, imag), a results.h5 and MATLAB v7.3
    (h5py's reversed axes) give the initial model the file's probe times the data's counts, to
    float32 rounding; two modes stay two modes."""
    truth = case.probe.astype(np.complex64)
    two = np.stack([truth, np.roll(truth, 3, axis=-1) * 0.3])
    np.save(tmp_path / "probe.npy", two)
    compound = np.zeros((64, 64), dtype=[("r", "<f4"), ("i", "<f4")])
    compound["r"], compound["i"] = truth.real, truth.imag
    with h5py.File(tmp_path / "compound.h5", "w") as f:
        f["beam"] = compound
    with h5py.File(tmp_path / "results.h5", "w") as f:
        f["probe"] = truth[None]
        f.attrs["dx_A"] = case.dx_m * 1e10
    matlab = np.zeros((1, 64, 64), dtype=[("real", "<f8"), ("imag", "<f8")])  # MATLAB (64, 64, 1) seen by h5py
    matlab["real"], matlab["imag"] = truth.T.real[None], truth.T.imag[None]
    with h5py.File(tmp_path / "probe.mat", "w") as f:
        f["probe"] = matlab
        f["p/dx_spec"] = np.array([[case.dx_m, case.dx_m]])
    files = {"npy": ({"path": str(tmp_path / "probe.npy")}, two), "cxi": (None, truth[None]),
             "compound": ({"path": str(tmp_path / "compound.h5"), "key": "beam"}, truth[None]),
             "results": ({"path": str(tmp_path / "results.h5")}, truth[None]),
             "mat": ({"path": str(tmp_path / "probe.mat")}, truth[None])}
    for name, (init, expected) in files.items():
        model = {"probe_init": init or {"path": str(tmp_path / "zp.cxi")}, "probe_modes": len(expected)}
        got, said, data = initial_probe(config_for(tmp_path, case, truth if name == "cxi" else None, model=model))
        want = scaled(expected, data.mean_intensity)
        np.testing.assert_allclose(got, want, atol=2e-6 * np.abs(want).max(), err_msg=name)
        assert any(line.startswith("model.probe_init: ") for line in said), name


def test_a_probe_of_a_finer_pixel_is_resampled_to_the_window(tmp_path, case):
    """The beam computed (NumPy) at 10 nm over 128 px, given with pixel_m, becomes the beam computed
    at the window's 20 nm over 64 px by Fourier interpolation, exactly for a beam band-limited within
    both grids: measured 4e-8 of its peak (float32 rounding); from 40 nm over 32 px the same."""
    fine = zone_plate.zone_plate_beam(128, case.dx_m / 2, case.outer_zone_width_m, case.central_stop_fraction,
                                      case.defocus_m)
    np.save(tmp_path / "fine.npy", fine)
    got, said, data = initial_probe(config_for(tmp_path, case, model={
        "probe_init": {"path": str(tmp_path / "fine.npy"), "pixel_m": case.dx_m / 2}}))
    want = scaled(case.probe, data.mean_intensity)
    assert np.abs(got[0] - want).max() < 1e-6 * np.abs(want).max()
    assert "resampled by Fourier interpolation to 64 x 64 px" in " ".join(said)


def test_probe_file_errors_name_the_file_and_the_fix(tmp_path, case):
    np.save(tmp_path / "real.npy", np.zeros((2, 64, 64), dtype=np.int32))
    with pytest.raises(DataError, match="real.npy: expected a complex probe"):
        initial_probe(config_for(tmp_path, case, model={"probe_init": {"path": str(tmp_path / "real.npy")}}))
    with h5py.File(tmp_path / "none.h5", "w") as f:
        f["other"] = np.ones(3)
    with pytest.raises(DataError, match="none.h5: no probe at probe or entry_1"):
        initial_probe(config_for(tmp_path, case, model={"probe_init": {"path": str(tmp_path / "none.h5")}}))
    np.save(tmp_path / "three.npy", np.ones((3, 64, 64), dtype=np.complex64))
    with pytest.raises(ConfigError, match="holds 3 probe modes, model.probe_modes is 2"):
        initial_probe(config_for(tmp_path, case, model={"probe_init": {"path": str(tmp_path / "three.npy")},
                                                        "probe_modes": 2}))
    with pytest.raises(ConfigError, match="model.probe_init: model.init_from starts the probe too"):
        ptyacc.load_config({"data": {"path": "x.cxi"}, "model": {"init_from": "r.h5", "probe_init": {"path": "p.npy"}}})


def test_matlab_v5_needs_scipy_or_reads_through_it(tmp_path, case):
    """A v5 .mat file is read by scipy where it is installed (as PtychoShelves writes it: MATLAB
    axes (y, x, modes), p.dx_spec), else the error says how to read it."""
    path = tmp_path / "v5.mat"
    try:
        import scipy.io as scipy_io
    except ImportError:
        scipy_io = None
    if scipy_io is None:
        path.write_bytes(b"MATLAB 5.0 MAT-file" + bytes(200))
        with pytest.raises(DataError, match="v5.mat: a MATLAB v5 .mat file needs scipy"):
            initial_probe(config_for(tmp_path, case, model={"probe_init": {"path": str(path)}}))
        return
    scipy_io.savemat(path, {"probe": case.probe[:, :, None], "p": {"dx_spec": [case.dx_m, case.dx_m]}})
    got, _, data = initial_probe(config_for(tmp_path, case, model={"probe_init": {"path": str(path)}}))
    want = scaled(case.probe, data.mean_intensity)
    np.testing.assert_allclose(got[0], want, atol=2e-6 * np.abs(want).max())


def test_the_optics_probe_is_the_zone_plates_beam(tmp_path, case):
    """experiment.optics (outer zone width, central stop) and focus_to_sample_m give the beam NumPy
    computes with its own pupil and kernel (edges one-pixel ramps there, sharp here: overlap 0.98);
    the opposite defocus is the other side of the focus (overlap far lower)."""
    optics = {"outer_zone_width_m": case.outer_zone_width_m, "central_stop_fraction": case.central_stop_fraction}
    overlaps = []
    for sign in (1, -1):
        got, said, _ = initial_probe(config_for(tmp_path, case, experiment={
            "optics": optics, "focus_to_sample_m": sign * case.defocus_m}))
        overlaps.append(abs(np.vdot(got[0], case.probe)) / np.linalg.norm(got[0]) / np.linalg.norm(case.probe))
    assert overlaps[0] > 0.98 and overlaps[1] < 0.8, overlaps
    assert "the optics' pupil (numerical aperture 0.001462" in " ".join(said)


def test_without_a_probe_the_defocus_follows_the_scans_overlap(tmp_path, case):
    """No file, no optics: the mean pattern's cone advanced by the defocus at which the beam
    overlaps 60% at the 7 px neighbour spacing (17.5 px across): run.log says so."""
    got, said, data = initial_probe(config_for(tmp_path, case))
    line = next(text for text in said if text.startswith("initial probe (X-ray far field)"))
    assert "the mean pattern's amplitude" in line and "nearest-neighbour spacing 0.14 µm" in line
    na = zone_plate.WAVELENGTH_M / (2 * case.outer_zone_width_m)
    diameter_m = 7 * case.dx_m / 0.4
    defocus_um = float(line.split("defocus of ")[1].split(" µm")[0])
    assert defocus_um == pytest.approx(diameter_m / (2 * na) * 1e6, rel=0.05)  # the cone's edge read within 5%


def centre_of_mass_px(probe: np.ndarray) -> np.ndarray:
    weight = (np.abs(probe) ** 2).sum(0)
    y, x = np.indices(weight.shape)
    return np.array([(weight * y).sum(), (weight * x).sum()]) / weight.sum()


def test_a_beam_off_the_detector_s_centre_is_advanced_about_its_own_axis(tmp_path, case):
    """The same patterns with the beam's cone 2 px down and 3 px left of the zero frequency (rolled: exactly a beam
    tilted by whole frequency pixels, the probe times a phase ramp): the initial probe is advanced about the cone's
    centre, read within 0.05 px and named in run.log, and sits where the centred data's does, within 0.05 px.
    Advanced about the zero frequency, it would sit lambda z q to the side (here more than a pixel), where the probe's
    hold keeps it, and the object would come out as far from the positions' frame."""
    from dataclasses import replace

    from ptyacc.physics import fresnel_propagator

    (tmp_path / "centred").mkdir()
    centred, _, data = initial_probe(config_for(tmp_path / "centred", case))
    tilted_case = replace(case, patterns=np.roll(case.patterns, (2, -3), axis=(-2, -1)))
    tilted, said, _ = initial_probe(config_for(tmp_path, tilted_case))
    line = next(text for text in said if text.startswith("initial probe (X-ray far field)"))
    axis = [float(v) for v in line.split("its centre (")[1].split(") px")[0].split(", ")]
    assert axis == pytest.approx([2.0, -3.0], abs=0.05)
    assert np.abs(centre_of_mass_px(tilted) - centre_of_mass_px(centred)).max() < 0.05
    # about the zero frequency: the probe's place moves by lambda z q (z from run.log's defocus)
    defocus_A = float(line.split("defocus of ")[1].split(" µm")[0]) * 1e4
    k = data.detector_px
    moved = np.array([2.0, -3.0]) * data.wavelength_A * defocus_A / (k * data.dx_A ** 2)
    assert np.abs(moved).max() > 1.0
    pupil = torch.from_numpy(np.sqrt(np.fft.ifftshift(tilted_case.patterns.mean(0)).astype(np.float64)))
    about_zero = torch.fft.fftshift(torch.fft.ifft2(pupil * fresnel_propagator(k, data.dx_A, data.wavelength_A,
                                                                                defocus_A, torch.complex128)))
    off = centre_of_mass_px(about_zero.numpy()[None]) - centre_of_mass_px(centred)
    assert np.abs(off) == pytest.approx(np.abs(moved), rel=0.1)


def test_an_optics_pupil_is_centred_on_a_beam_off_the_detector_s_centre(tmp_path, case):
    """experiment.optics with the beam's cone 2 px down and 3 px left of the zero frequency: the optics' pupil is the
    centred one moved to the cone (its spectrum's amplitude the centred probe's rolled by (2, -3) px, to 1e-6 of its
    peak) and the probe advanced about it sits where the centred data's does, within 0.05 px."""
    from dataclasses import replace

    optics = {"optics": {"outer_zone_width_m": case.outer_zone_width_m,
                         "central_stop_fraction": case.central_stop_fraction}, "focus_to_sample_m": case.defocus_m}
    (tmp_path / "centred").mkdir()
    centred, _, _ = initial_probe(config_for(tmp_path / "centred", case, experiment=optics))
    tilted_case = replace(case, patterns=np.roll(case.patterns, (2, -3), axis=(-2, -1)))
    tilted, said, _ = initial_probe(config_for(tmp_path, tilted_case, experiment=optics))
    assert "about the beam's cone's centre in the mean pattern, (+2.00, -3.00) px" in " ".join(said)

    def spectrum(probe):
        return np.abs(np.fft.fft2(np.fft.ifftshift(probe[0])))

    expected = np.roll(spectrum(centred), (2, -3), axis=(0, 1))
    assert np.abs(spectrum(tilted) - expected).max() < 1e-6 * expected.max()
    assert np.abs(centre_of_mass_px(tilted) - centre_of_mass_px(centred)).max() < 0.05


def test_the_cone_s_aperture_is_read_about_its_axis_and_a_cone_cut_by_the_window_is_warned(tmp_path, case):
    """The beam's cone rolled 2 px down and 3 px left, or 10 px right: its numerical aperture read about its centre is
    the zone plate's (wavelength / (2 outer zone width), within 3 %), as the centred one's; read about the zero
    frequency it came out a quarter wider at 10 px (and the overlap's distance as much short). A cone 20 px off in
    the 64 px window reaches its edge: warned, with the crop to take; 3 px and 10 px off, not."""
    from dataclasses import replace

    from ptyacc.physics.footprint import cone_numerical_aperture
    from ptyacc.reconstruction.xray_probe import cone_cut_warning

    na = zone_plate.WAVELENGTH_M / (2 * case.outer_zone_width_m)
    _, _, data = initial_probe(config_for(tmp_path, case))
    for roll in ((0, 0), (2, -3), (0, 10)):
        mean = np.fft.ifftshift(np.roll(case.patterns, roll, axis=(-2, -1)).mean(0))
        about = cone_numerical_aperture(mean, data.dk_invA, data.wavelength_A, roll)
        assert about == pytest.approx(na, rel=0.03), roll
    assert cone_numerical_aperture(mean, data.dk_invA, data.wavelength_A) > 1.2 * na
    radius_px = na / (data.wavelength_A * data.dk_invA)
    for roll, warned in (((2, -3), False), ((0, 10), False), ((0, 20), True)):
        (tmp_path / str(roll[1])).mkdir()
        _, said, _ = initial_probe(config_for(tmp_path / str(roll[1]),
                                              replace(case, patterns=np.roll(case.patterns, roll, axis=(-2, -1)))))
        assert any("warning: the beam's cone lies" in line and "data.transform.crop" in line for line in said) == warned
    assert cone_cut_warning((0.5, -0.5), 40.0, 64) == []  # a cut as even as the window's: nothing to crop
    assert cone_cut_warning((0.0, 20.0), radius_px, 64) == [] and cone_cut_warning((0.0, 20.0), radius_px + 20, 64)


def test_a_masked_hot_pixel_leaves_the_default_probe_alone(tmp_path, case):
    """A detector pixel at 1e9 counts in every pattern, flagged bad in the CXI mask: the cone and
    so the defocus are those of the clean data (unmasked, the hot pixel alone would be the cone)."""
    clean = initial_probe(config_for(tmp_path, case))[1]
    zone_plate.write_cxi(tmp_path / "zp.cxi", case)
    with h5py.File(tmp_path / "zp.cxi", "a") as f:
        f["entry_1/instrument_1/detector_1/data"][:, 3, 5] = 10**9
        mask = np.zeros((64, 64), dtype=np.uint32)
        mask[3, 5] = 1
        f["entry_1/instrument_1/detector_1/mask"] = mask
    config = ptyacc.load_config({"data": {"path": str(tmp_path / "zp.cxi")}, "experiment": {"radiation": "xray"}})
    hot = initial_probe(config)[1]
    line = [text for text in clean if text.startswith("initial probe")]
    assert line == [text for text in hot if text.startswith("initial probe")] and "defocus of 1" in line[0]


@pytest.mark.parametrize("with_probe", [False, True], ids=["default_probe", "true_probe_file"])
def test_defaults_on_counted_zone_plate_data_converge_without_nan(tmp_path, case, with_probe):
    """1e7 photons per pattern, whole-number counts: with the defaults (Poisson loss, the
    preconditioned steps; optim.on_nan: stop) no NaN, from the default probe or from the true one
    as a file; the phase's NCC with the truth >= 0.9 (measured 0.994 and 0.999 after 20
    iterations; before the object was held to its amplitude bound after every step, both stopped
    with NaN at iteration 1, and the flat-phase probe of the mean pattern reached NCC 0.2)."""
    model = {"probe_init": {"path": str(tmp_path / "zp.cxi")}} if with_probe else {}
    config = config_for(tmp_path, case, case.probe.astype(np.complex64) if with_probe else None, model=model)
    rec = ptyacc.reconstruct(config, write=False)
    assert np.all(np.isfinite(rec.loss))
    assert ncc_with_truth(rec, case) >= 0.9
    assert rec.poisson_deviance < 3


def test_info_reports_the_nearest_neighbour_spacing_of_an_interleaved_scan(tmp_path, case):
    """The case's consecutive positions lie 47 px apart, its neighbours 7: info says 7 and the
    overlap with the probe's 22.6 px diameter, and no warning."""
    from ptyacc.commands.info import data_report

    lines = data_report(config_for(tmp_path, case))
    overlap = next(line for line in lines if line.startswith("scan overlap"))
    assert "nearest-neighbour spacing 7 px" in overlap and "69%" in overlap
    assert "nearest-neighbour spacing 7 px (median), window 64 px" in " ".join(lines)
    assert not any(line.startswith("warning") for line in lines)


def test_a_scan_too_sparse_warns_in_info_and_on_the_terminal(tmp_path, capsys, case):
    """The case's raster at 30 px steps, against a probe 22.6 px across: info warns, and so does
    the run on the terminal (one line naming the overlap and the fix)."""
    from ptyacc.commands.info import data_report

    sparse = zone_plate.simulate(grid=3, step_px=30)
    config = config_for(tmp_path, sparse, optim={"iterations": 1, "batch_size": 3})
    warnings = [line for line in data_report(config) if line.startswith("warning: scan overlap")]
    assert len(warnings) == 1 and "the probes barely overlap" in warnings[0]
    ptyacc.reconstruct(config, write=False)
    assert "ptyacc: warning: scan overlap" in capsys.readouterr().err
    optics = {"optics": {"outer_zone_width_m": case.outer_zone_width_m, "central_stop_fraction": 0.4},
              "focus_to_sample_m": case.defocus_m}  # the beam known: its footprint against the spacing
    known = config_for(tmp_path, sparse, experiment=optics)
    warnings = [line for line in data_report(known) if line.startswith("warning: scan overlap")]
    assert len(warnings) == 1 and "nearest-neighbour spacing 30 px" in warnings[0], warnings


def test_init_writes_the_probe_key_when_the_file_carries_one(tmp_path, case):
    from ptyacc.commands.init_config import XRAY_FOCUS_START, init_config

    zone_plate.write_cxi(tmp_path / "with.cxi", case, case.probe.astype(np.complex64))
    zone_plate.write_cxi(tmp_path / "without.cxi", case)
    text = init_config(tmp_path / "with.cxi", tmp_path / "with.yaml")
    assert "probe_init: {path: with.cxi, key: entry_1/instrument_1/source_1/probe}" in text
    without = init_config(tmp_path / "without.cxi", tmp_path / "without.yaml")
    assert "probe_init" not in without and "probe_modes" not in without  # electrons' four modes are not X-rays'
    assert yaml.safe_load(without)["optim"]["start"] == {"probe_focus": XRAY_FOCUS_START}
    assert "start" not in yaml.safe_load(text)["optim"]  # the file's probe is where it was measured
    (tmp_path / "with.yaml").write_text(text)
    assert ptyacc.load_config(tmp_path / "with.yaml").model.probe_init.key == "entry_1/instrument_1/source_1/probe"
    assert "probe_modes" not in text
    zone_plate.write_cxi(tmp_path / "modes.cxi", case, np.stack([case.probe, 0.3 * case.probe.T]).astype(np.complex64))
    assert "  probe_modes: 2   # as many as the file's probe holds" in init_config(tmp_path / "modes.cxi",
                                                                                   tmp_path / "modes.yaml")


def test_probe_diameter_against_known_shapes():
    """A uniform disk of radius 10 px holds 90% of its intensity within sqrt(0.9) 10 px; wrapped
    around the window's edge it measures the same; a point is a pixel across."""
    from ptyacc.physics.footprint import probe_diameter_px

    y, x = np.indices((64, 64)) - 32
    disk = torch.from_numpy((np.hypot(y, x) <= 10).astype(np.complex64))
    assert probe_diameter_px(disk) == pytest.approx(2 * np.sqrt(0.9) * 10, abs=1.0)
    assert probe_diameter_px(torch.roll(disk, (32, 32), (0, 1))) == pytest.approx(probe_diameter_px(disk), abs=1e-9)
    point = torch.zeros(64, 64, dtype=torch.complex64)
    point[32, 32] = 1
    assert probe_diameter_px(point) == 1.0  # a pixel across, never 0 (the overlap divides by it)
