"""model.init_from with other packages' reconstructions (PtyRAD's HDF5, PtychoShelves' Niter*.mat
in v7.3 and, with SciPy, older MAT, py4DSTEM's emdfile HDF5), written here in each package's layout
(ptyacc/interop/foreign.py says where each layout comes from), and the resampling that fits any
start to this run's pixel, slices, modes and window."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import ptyacc
from ptyacc.interop.foreign import read_start
from ptyacc.interop.resample import resample_object, resample_probe, resample_slices, sample_grid

K, DX_A, THICKNESS_A = 16, 0.4, 3.0


def smooth_field(y_A: np.ndarray, x_A: np.ndarray) -> np.ndarray:
    """A known complex transmission (features a few Å wide, phase within +-2.6 rad) at (y, x) in Å."""
    y, x = np.meshgrid(y_A, x_A, indexing="ij")
    phase = 1.8 * np.sin(y / 1.3) * np.cos(x / 1.7) + 0.8 * np.cos((x + y) / 2.1)
    amplitude = 0.9 + 0.08 * np.sin(x / 1.9 - y / 2.3)
    return amplitude * np.exp(1j * phase)


@pytest.fixture
def start():
    """A reconstruction to write in each layout: object (1, 2, 40, 44), probe (2, K, K), 12
    window corners (px, fractional)."""
    rng = np.random.default_rng(4)
    obj = np.stack([smooth_field(np.arange(40) * DX_A + s, np.arange(44) * DX_A) for s in (0.0, 0.7)])[None]
    probe = (rng.normal(size=(2, K, K)) + 1j * rng.normal(size=(2, K, K))).astype(np.complex64)
    corners = rng.uniform(0, 20, size=(12, 2))
    return obj.astype(np.complex64), probe, corners


def check(result, obj, probe, corners, thickness=THICKNESS_A):
    np.testing.assert_allclose(result.object, obj, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(result.probe, probe)
    np.testing.assert_allclose(result.positions_A, (corners + K // 2) * DX_A, rtol=1e-6)  # PtyRAD: float32
    assert result.dx_A == pytest.approx(DX_A, rel=1e-6) and result.origin_A == (0.0, 0.0)
    assert result.attrs.get("slice_thickness_A") == (None if thickness is None else pytest.approx(thickness))


def test_ptyrad_hdf5(tmp_path, start):
    obj, probe, corners = start
    crop = np.round(corners).astype(np.int16)
    with h5py.File(tmp_path / "model_iter0100.hdf5", "w") as f:  # PtyRAD's save_dict_to_hdf5 layout
        f["optimizable_tensors/obja"] = np.abs(obj).astype(np.float32)
        f["optimizable_tensors/objp"] = np.angle(obj).astype(np.float32)
        f["optimizable_tensors/probe"] = probe
        f["optimizable_tensors/probe_pos_shifts"] = (corners - crop).astype(np.float32)
        f["model_attributes/crop_pos"] = crop
        f["model_attributes/dx"] = np.float32(DX_A)
        f["model_attributes/slice_thickness"] = np.float32(THICKNESS_A)
        f["optimizable_tensors/obj_tilts"] = np.array([[1.5, -2.0]], np.float32)
    result = read_start(tmp_path / "model_iter0100.hdf5")
    assert result.attrs["written_by"] == "PtyRAD" and result.tilt_mrad.tolist() == [-1.5, 2.0]
    check(result, obj, probe, crop + (corners - crop).astype(np.float32))  # PtyRAD keeps the shifts in float32


def test_ptyrads_own_saved_model():
    """A model file written by PtyRAD 1.0's own writer (tests/ptyrad_reference.py: the initial state
    of tests/data/ptyrad_own_params.yaml: 3 slices, 3 probe modes) against what its model held."""
    data = Path(__file__).parent / "data"
    held = np.load(data / "ptyrad_geometry.npz")
    result = read_start(data / "ptyrad_model.hdf5")
    np.testing.assert_allclose(result.object, held["model_object"], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(result.probe, held["model_probe"])
    k = held["model_probe"].shape[-1]
    np.testing.assert_allclose(result.positions_A, (held["model_positions_px"] + k // 2) * held["model_dx_A"], rtol=1e-6)
    assert result.attrs["slice_thickness_A"] == pytest.approx(4.0) and result.object.shape[:2] == (1, 3)


def ptychoshelves_variables(obj, probe, corners):
    """MATLAB's variables: object (Ny, Nx, Nz), probe (Ny, Nx, pmode), positions (x, y) about the centre."""
    offset = np.ceil(np.asarray(obj.shape[-2:]) / 2 - K / 2) - 1
    return np.moveaxis(obj[0], 0, 2), np.moveaxis(probe, 0, 2), (corners - offset)[:, ::-1]


def test_ptychoshelves_mat_v73(tmp_path, start):
    obj, probe, corners = start
    matlab_obj, matlab_probe, positions = ptychoshelves_variables(obj, probe, corners)
    complex_type = np.dtype([("real", "<f4"), ("imag", "<f4")])

    def matlab_complex(a):  # v7.3: HDF5 with the axes reversed, complex as a real/imag compound
        out = np.empty(a.shape[::-1], complex_type)
        out["real"], out["imag"] = a.real.T, a.imag.T
        return out
    with h5py.File(tmp_path / "Niter200.mat", "w", userblock_size=512) as f:
        f["object"], f["probe"] = matlab_complex(matlab_obj), matlab_complex(matlab_probe)
        f["outputs/probe_positions"] = positions.T
        f["p/dx_spec"] = np.array([[DX_A, DX_A]])  # fold_slice's electron runs: Å
    result = read_start(tmp_path / "Niter200.mat")
    assert result.attrs["written_by"] == "PtychoShelves"
    check(result, obj, probe, corners, thickness=None)


def test_ptychoshelves_mat_v5_with_scipy(tmp_path, start):
    scipy_io = pytest.importorskip("scipy.io")
    obj, probe, corners = start
    matlab_obj, matlab_probe, positions = ptychoshelves_variables(obj, probe, corners)
    scipy_io.savemat(tmp_path / "Niter200.mat", {"object": matlab_obj, "probe": matlab_probe,
                                                 "outputs": {"probe_positions": positions},
                                                 "p": {"dx_spec": [DX_A * 1e-10] * 2}})  # X-ray runs: m
    check(read_start(tmp_path / "Niter200.mat"), obj, probe, corners, thickness=None)


def write_py4dstem(path, obj, probe, centres_px, object_type="complex"):
    """py4DSTEM's ptycho.save: an emdfile tree, the reconstruction a custom group of Array nodes
    and Metadata groups."""
    with h5py.File(path, "w") as f:
        root = f.create_group("ptycho_root")
        root.attrs.update(emd_group_type="root", python_class="Root")
        group = root.create_group("ptycho")
        group.attrs.update(emd_group_type="custom", python_class="MultislicePtychography")
        for name, data in (("_object_emd", obj), ("_probe_emd", probe)):
            node = group.create_group(name)
            node.attrs.update(emd_group_type="custom_array", python_class="Array")
            node["data"] = data
        pre = group.create_group("metadatabundle/preprocess_metadata")
        pre["positions_px"], pre["sampling"] = centres_px, np.array([DX_A, DX_A])
        inst = group.create_group("metadatabundle/instantiation_metadata")
        inst["object_type"], inst["slice_thicknesses"] = object_type, np.array([THICKNESS_A])


def test_py4dstem_emd(tmp_path, start):
    obj, probe, corners = start
    write_py4dstem(tmp_path / "ptycho.h5", obj[0], probe, corners + K // 2)
    result = read_start(tmp_path / "ptycho.h5")
    assert result.attrs["written_by"] == "py4DSTEM"
    check(result, obj, probe, corners)
    potential = np.angle(obj[0, 0]).astype(np.float32)
    write_py4dstem(tmp_path / "potential.h5", potential, probe[0], corners + K // 2, "potential")
    np.testing.assert_allclose(read_start(tmp_path / "potential.h5").object[0, 0], np.exp(1j * potential), atol=1e-6)


def ncc(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float(np.abs(np.vdot(a, b)) / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("new_dx", [0.3, 0.37, 0.55])
def test_a_resampled_object_matches_the_field_at_the_new_pixels(new_dx):
    """The object on 0.4 Å pixels resampled to another pixel against the known field there."""
    old = smooth_field(np.arange(60) * DX_A, np.arange(60) * DX_A)[None]
    origin = np.array([1.1, 0.7])  # Å, where the new grid starts
    shape = (int(18 / new_dx), int(18 / new_dx))
    values, inside = resample_object(old, *sample_grid(origin / DX_A, new_dx / DX_A, shape))
    truth = smooth_field(origin[0] + np.arange(shape[0]) * new_dx, origin[1] + np.arange(shape[1]) * new_dx)
    assert inside.all()
    assert ncc(np.angle(values[0]), np.angle(truth)) > 0.99
    assert ncc(values[0], truth) > 0.99
    same, _ = resample_object(old, *sample_grid(np.array([3.0, 5.0]), 1.0, (20, 20)))
    np.testing.assert_allclose(same[0], old[0, 3:23, 5:25], rtol=2e-7, atol=2e-7)  # whole pixels: a copy


def test_slices_are_merged_and_split_keeping_the_summed_phase():
    rng = np.random.default_rng(1)
    obj = (0.95 * np.exp(1j * rng.uniform(-0.5, 0.5, size=(1, 4, 6, 6)))).astype(np.complex64)
    for n in (1, 2, 3, 6):
        out = resample_slices(obj, n)
        assert out.shape == (1, n, 6, 6)
        np.testing.assert_allclose(np.angle(out).sum(1), np.angle(obj).sum(1), atol=1e-5)
        np.testing.assert_allclose(np.abs(out).prod(1), np.abs(obj).prod(1), rtol=1e-5)
    np.testing.assert_allclose(resample_slices(obj, 2)[0, 0], obj[0, 0] * obj[0, 1], rtol=1e-5)


def test_a_resampled_probe_matches_the_probe_made_on_the_new_pixels():
    from ptyacc.physics import stem_probe, wavelength_A

    lam = wavelength_A(80e3)

    def probe(dx: float, k: int) -> np.ndarray:
        return stem_probe(k, 1 / (k * dx), lam, 25.0, {"C10": -30.0}).numpy()[None]
    resampled = resample_probe(probe(0.25, 64), 0.25, 0.3, 48)
    truth = probe(0.3, 48)
    assert ncc(resampled, truth) > 0.99
    assert np.sum(np.abs(resampled) ** 2) == pytest.approx(1.0, rel=1e-5)  # the total intensity is kept


@pytest.mark.slow
def test_a_run_starts_from_a_ptyrad_file_and_from_other_pixels_slices_and_modes(tmp_path):
    """A ptyacc result written in PtyRAD's layout starts a run as its own results.h5 does (object to
    float rounding, probe to its scale); the same result starts a run with other pixels, two slices and
    two probe modes, and run.log says what was done."""
    from conftest import tiny_config

    frozen = {"iterations": 1, "lr": {"object": 0.0, "probe": 0.0, "positions": 0.0}}
    first = ptyacc.reconstruct(ptyacc.load_config(tiny_config(tmp_path / "a", optim={"iterations": 3})))
    res = first.results
    k = res.probe.shape[-1]
    centres = (res.positions_A - np.asarray(res.origin_A)) / res.dx_A
    with h5py.File(tmp_path / "ptyrad.h5", "w") as f:
        f["optimizable_tensors/obja"], f["optimizable_tensors/objp"] = np.abs(res.object), np.angle(res.object)
        f["optimizable_tensors/probe"] = res.probe
        f["optimizable_tensors/probe_pos_shifts"] = centres - k // 2
        f["model_attributes/crop_pos"] = np.zeros_like(centres, dtype=np.int16)
        f["model_attributes/dx"] = res.dx_A
    again = ptyacc.reconstruct(ptyacc.load_config(tiny_config(tmp_path / "b", model={"init_from": str(tmp_path / "ptyrad.h5")},
                                                              optim=frozen)), write=False).results
    shift = np.round((np.asarray(again.origin_A) - 0) / res.dx_A).astype(int)  # PtyRAD's object starts at 0 Å
    (r0, c0), (r1, c1) = np.ceil(centres.min(0)).astype(int), np.floor(centres.max(0)).astype(int)
    np.testing.assert_allclose(again.object[..., r0 - shift[0]:r1 - shift[0], c0 - shift[1]:c1 - shift[1]],
                               res.object[..., r0:r1, c0:c1], atol=1e-5)
    assert ncc(again.probe, res.probe) > 0.99999
    other = tiny_config(tmp_path / "c", model={"init_from": str(first.output_dir / "results.h5"), "slices": 2,
                                               "probe_modes": 2}, optim=frozen)
    other["experiment"]["dx_A"] = 0.25
    moved = ptyacc.reconstruct(ptyacc.load_config(other))
    log = (moved.output_dir / "run.log").read_text()
    assert "slices 1 -> 2" in log and "resampled to 0.25 A px" in log and "1 further from this config's optics" in log
    new = moved.results
    rows, cols = sample_grid((np.asarray(new.origin_A) - np.asarray(res.origin_A)) / res.dx_A, 0.25 / res.dx_A,
                             new.object.shape[-2:])
    expected, inside = resample_object(resample_slices(res.object, 2), rows, cols)
    np.testing.assert_allclose(new.object[:, :, inside], expected[:, :, inside], atol=1e-4)


def test_a_file_holding_no_reconstruction_is_refused(tmp_path):
    from ptyacc.errors import DataError

    with h5py.File(tmp_path / "patterns.h5", "w") as f:
        f["patterns"] = np.zeros((2, 4, 4), np.float32)
    with pytest.raises(DataError, match="patterns.h5 holds no reconstruction ptyacc knows"):
        read_start(tmp_path / "patterns.h5")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="neither HDF5"):
        read_start(tmp_path / "notes.txt")
