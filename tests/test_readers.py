"""Pattern file readers (HDF5, CXI, .npy, .mat, EMPAD .raw) behind inspect_patterns /
read_patterns, on small files each test writes; the convert command's round trip."""

import re
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from ptyacc.commands.cli import main
from ptyacc.data.convert import convert_patterns
from ptyacc.data.formats import chunks
from ptyacc.data.readers import (
    inspect_patterns,
    read_patterns,
)
from ptyacc.errors import ConfigError, DataError

PETRA = Path("/work/shared/data/PETRAIII_P25_Near_Field_Ptycho.cxi")
CXI_DETECTOR = "entry_1/instrument_1/detector_1"


def counts(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).poisson(5.0, size=shape).astype(np.int32)


def doubled(chunk: np.ndarray) -> np.ndarray:
    return chunk * 2


def raises(match: str, error=DataError):
    return pytest.raises(error, match=re.escape(match))


# --- files the tests write


def write_cxi(path: Path, data: np.ndarray, **extra) -> Path:
    """A CXI file holding ``data`` at detector_1/data, calibrated like a synchrotron
    measurement; ``extra`` maps paths below entry_1 to datasets (None leaves one out)."""
    n = len(data)
    layout = {
        "instrument_1/detector_1/data": data,
        "instrument_1/detector_1/distance": np.float32(1.12),
        "instrument_1/detector_1/x_pixel_size": np.float32(55e-6),
        "instrument_1/detector_1/y_pixel_size": np.float32(55e-6),
        "instrument_1/source_1/wavelength": 1e-10,
        "instrument_1/source_1/energy": 12398.42 * 1.602176634e-19,
        "sample_1/geometry_1/translation": np.stack([np.arange(n) * 1e-6, np.arange(n) * -2e-6, np.zeros(n)], 1),
    }
    layout.update(extra)
    with h5py.File(path, "w") as f:
        f["cxi_version"] = 160
        for key, value in layout.items():
            if value is not None:
                f[f"entry_1/{key}"] = value
    return path


def write_mat_v73(path: Path, variables: dict[str, np.ndarray]) -> Path:
    """A MATLAB v7.3 file: HDF5 after a 512-byte MATLAB header, each variable stored with its
    axes reversed, the way MATLAB writes its column-major arrays."""
    with h5py.File(path, "w", userblock_size=512) as f:
        for name, value in variables.items():
            f[name] = np.asarray(value).T
            f[name].attrs["MATLAB_class"] = np.bytes_("double")
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created by ptyacc tests".ljust(116))
    return path


def write_mat_v5(path: Path, variables: dict) -> Path:
    """A MATLAB v5 file, written by scipy (an optional dependency: the test is skipped without it)."""
    pytest.importorskip("scipy.io").savemat(path, variables)
    return path


def write_empad(path: Path, patterns: np.ndarray, metadata_rows: int = 2) -> Path:
    """EMPAD frames: each (ky, kx) float32 pattern followed by ``metadata_rows`` rows of junk."""
    n, k_y, k_x = patterns.shape
    frames = np.full((n, k_y + metadata_rows, k_x), 7e9, dtype="<f4")
    frames[:, :k_y] = patterns
    frames.tofile(path)
    return path


@pytest.fixture
def cxi_file(tmp_path):
    data = counts((6, 8, 8))
    mask = np.zeros((8, 8), np.uint32)
    mask[0, 3] = 1
    mask[5, 5] = 0x80
    darks = np.stack([np.full((8, 8), 1.0), np.full((8, 8), 3.0)])
    path = write_cxi(tmp_path / "scan.cxi", data, **{"instrument_1/detector_1/mask": mask,
                                                      "instrument_1/detector_1/data_dark": darks})
    return path, data, mask


# --- HDF5, ptyacc's layout


def test_hdf5_reads_patterns_positions_and_attributes(pattern_file):
    path, patterns, positions = pattern_file
    info = inspect_patterns(path)
    assert (info.format, info.key, info.shape, info.scan_shape) == ("hdf5", "/patterns", (3, 4, 8, 8), (3, 4))
    assert info.attrs == {"energy_eV": 80e3, "semiangle_mrad": 20.0, "defocus_A": 10.0, "dk_invA": 0.25,
                          "scan_step_A": 0.5}
    raw = read_patterns(path)
    assert raw.patterns.dtype == np.float32 and raw.format == "hdf5"
    np.testing.assert_array_equal(raw.patterns, patterns.reshape(12, 8, 8))
    np.testing.assert_array_equal(raw.positions_A, positions)
    assert raw.mask is None and raw.background is None


def test_hdf5_ignores_positions_of_another_shape(tmp_path):
    """A config that names such a dataset checks it; the reader does not guess."""
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["patterns"] = counts((4, 8, 8))
        f["positions_A"] = np.zeros((4, 3))
    assert read_patterns(path).positions_A is None


def test_hdf5_finds_the_only_pattern_dataset(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["scan/frames"] = counts((4, 8, 8))
        f["scan/positions"] = np.zeros((4, 2))
    assert inspect_patterns(path).key == "/scan/frames"


@pytest.mark.parametrize("fmt", ["hdf5", "cxi", "mat"])
def test_positions_key_is_read_with_the_rest(tmp_path, fmt):
    """The dataset that experiment.positions names in the data file comes with the inspection,
    as stored (any shape: the calibration checks it); a missing one is named."""
    data, xy = counts((4, 6, 6)), np.arange(12.0).reshape(4, 3)
    if fmt == "hdf5":
        path = tmp_path / "d.h5"
        with h5py.File(path, "w") as f:
            f["patterns"], f["scan/xy"] = data, xy
    elif fmt == "cxi":
        path = write_cxi(tmp_path / "d.cxi", data)
        with h5py.File(path, "a") as f:
            f["scan/xy"] = xy
    else:
        path = write_mat_v73(tmp_path / "d.mat", {"dp": data.transpose(1, 2, 0)})
        with h5py.File(path, "a") as f:
            f["scan/xy"] = xy
    assert inspect_patterns(path).named_positions is None
    np.testing.assert_array_equal(inspect_patterns(path, positions_key="scan/xy").named_positions, xy)
    with raises(f"{path}: no dataset 'xy' (experiment.positions.key); datasets: "):
        inspect_patterns(path, positions_key="xy")


@pytest.mark.parametrize("name, what", [("d.npy", "a .npy file"), ("scan_x2_y2.raw", "an EMPAD .raw file"),
                                        ("d.mat", "a MATLAB v5 .mat file")])
def test_positions_key_in_a_file_without_datasets(tmp_path, name, what):
    data, path = counts((4, 8, 8)), tmp_path / name
    if name.endswith(".npy"):
        np.save(path, data)
    elif name.endswith(".raw"):
        write_empad(path, data.astype(np.float32), metadata_rows=0)
    else:
        write_mat_v5(path, {"dp": data.transpose(1, 2, 0)})
    options = {"detector_shape": (8, 8), "frame_rows": 8} if name.endswith(".raw") else {}
    with raises(f"{path}: {what} holds no HDF5 datasets, so experiment.positions.key 'xy' cannot name one"):
        inspect_patterns(path, positions_key="xy", **options)


@pytest.mark.parametrize("fmt", ["hdf5", "cxi", "npy", "mat", "empad"])
def test_rows_and_prepare_across_chunks(tmp_path, monkeypatch, fmt):
    """Only the rows asked for come back, in order, each prepared once, also when they span
    several chunks with gaps between them (chunks of 3 patterns here)."""
    data = counts((14, 6, 6))
    path = {
        "hdf5": lambda: _h5(tmp_path / "d.h5", data),
        "cxi": lambda: write_cxi(tmp_path / "d.cxi", data),
        "npy": lambda: _npy(tmp_path / "d.npy", data),
        "mat": lambda: write_mat_v73(tmp_path / "d.mat", {"dp": data.transpose(1, 2, 0)}),
        "empad": lambda: write_empad(tmp_path / "d.raw", data),
    }[fmt]()
    options = {"scan_shape": (2, 7), "detector_shape": (6, 6)} if fmt == "empad" else {}
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 3 * 8 * 6 * 4)
    rows = np.array([0, 2, 3, 7, 12, 13])
    calls = []

    def prepare(chunk):
        calls.append(len(chunk))
        return chunk + 0.5

    raw = read_patterns(path, None, prepare, rows, **options)
    assert raw.format == fmt
    np.testing.assert_array_equal(raw.patterns, data[rows] + 0.5)
    assert sum(calls) == len(rows) and len(calls) > 1
    np.testing.assert_array_equal(read_patterns(path, **options).patterns, data)
    assert read_patterns(path, rows=np.arange(0), **options).patterns.shape == (0, 6, 6)


def test_4d_rows_read_in_stretches_shorter_than_a_scan_row(tmp_path, monkeypatch):
    """Chunks of 2 patterns inside scan rows of 5: every wanted pattern once, in order."""
    data = counts((3, 5, 6, 6))
    path = _h5(tmp_path / "d.h5", data)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 2 * 6 * 6 * 4)
    calls = []

    def prepare(chunk):
        calls.append(len(chunk))
        return chunk * 2

    rows = np.array([0, 1, 2, 4, 5, 9, 10, 14])
    raw = read_patterns(path, None, prepare, rows)
    np.testing.assert_array_equal(raw.patterns, data.reshape(15, 6, 6)[rows] * 2)
    assert max(calls) <= 2 and sum(calls) == len(rows)
    np.testing.assert_array_equal(read_patterns(path).patterns, data.reshape(15, 6, 6))


def test_rows_must_be_increasing_indices(pattern_file):
    path, _, _ = pattern_file
    for rows in ([3, 1], [0, 12], [1, 1]):
        with pytest.raises(ValueError, match="strictly increasing indices in \\[0, 12\\)"):
            read_patterns(path, rows=np.array(rows))


def _h5(path: Path, data: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        f["patterns"] = data
    return path


def _npy(path: Path, data: np.ndarray) -> Path:
    np.save(path, data)
    return path


@pytest.mark.parametrize("datasets, key, message", [
    ({"a": np.zeros((2, 4, 4)), "b": np.zeros((3, 4, 4))}, None,
     "several datasets could hold the patterns (a, b); set data.key"),
    ({"a": np.zeros((4, 4))}, None, "no 3D or 4D numeric dataset found; set data.key"),
    ({"a": np.zeros((2, 4, 4))}, "b", "no dataset 'b' (data.key); datasets: a"),
    ({"a": np.zeros((4, 4))}, "a", ":/a: expected 3D (N, ky, kx) or 4D (slow, fast, ky, kx) patterns, found shape (4, 4)"),
    ({"a": np.zeros((0, 4, 4))}, "a", ":/a: is empty (shape (0, 4, 4))"),
    ({"a": np.zeros((2, 4, 4), complex)}, "a", ":/a: pattern values must be real numbers"),
    ({"patterns": np.zeros((2, 4, 4)), "mask": np.ones((5, 5))}, None,
     ":mask: expected a numeric (ky, kx) = (4, 4) image to match the patterns, found shape (5, 5)"),
])
def test_hdf5_bad_files(tmp_path, datasets, key, message):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            f[name] = value
    with raises(f"{path}{message}" if message.startswith(":") else f"{path}: {message}"):
        read_patterns(path, key)


@pytest.mark.parametrize("name", ["d.h5", "d.cxi", "d.npy", "d.mat", "d.raw", "d"])
def test_missing_file_and_folder(tmp_path, name):
    with raises(f"{tmp_path / name}: data file not found"):
        inspect_patterns(tmp_path / name, scan_shape=(1, 1))
    (tmp_path / name).mkdir()
    with raises(f"{tmp_path / name}: is a folder, not "):
        read_patterns(tmp_path / name, scan_shape=(1, 1))


@pytest.mark.parametrize("name, message", [
    ("d.h5", "cannot be read as HDF5"),
    ("d.cxi", "cannot be read as HDF5"),
    ("d.npy", "cannot be read as a .npy array"),
    ("d.mat", "cannot be read as a MATLAB .mat file"),
    ("d.txt", "unknown pattern file format: expected HDF5/CXI, NumPy .npy or MATLAB .mat content, or the "
              "extension .raw for EMPAD, found extension '.txt'"),
])
def test_unreadable_files(tmp_path, name, message):
    path = tmp_path / name
    path.write_text("slow,fast\n1,2\n")
    with raises(f"{path}: {message}"):
        inspect_patterns(path)


def test_format_from_content_or_option(tmp_path):
    data = counts((3, 4, 4))
    np.save(tmp_path / "d.npy", data)
    (tmp_path / "d.npy").rename(tmp_path / "patterns.bin")
    assert inspect_patterns(tmp_path / "patterns.bin").format == "npy"
    write_cxi(tmp_path / "scan.h5", data)
    assert inspect_patterns(tmp_path / "scan.h5").format == "cxi"
    assert inspect_patterns(tmp_path / "scan.h5", file_format="hdf5").format == "hdf5"  # CXI read as plain HDF5
    write_empad(tmp_path / "frames.dat", data)
    raw = read_patterns(tmp_path / "frames.dat", file_format="empad", scan_shape=(1, 3), detector_shape=(4, 4))
    np.testing.assert_array_equal(raw.patterns, data)


def test_bad_options(tmp_path):
    path = _npy(tmp_path / "d.npy", counts((3, 4, 4)))
    with raises("file_format: must be one of hdf5, cxi, npy, mat, empad, rsciio, got 'tiff'", ConfigError):
        inspect_patterns(path, file_format="tiff")
    with raises("scan_shape: expected two positive integers, got (0, 3)", ConfigError):
        inspect_patterns(path, scan_shape=(0, 3))
    with raises("frame_rows: expected an integer >= detector_shape[0] = 128, got 100", ConfigError):
        inspect_patterns(path, frame_rows=100)
    with pytest.raises(TypeError, match="scan_shap"):
        inspect_patterns(path, scan_shap=(1, 3))


# --- CXI


def test_cxi_patterns_mask_background_positions_calibration(cxi_file):
    path, data, mask = cxi_file
    info = inspect_patterns(path)
    assert (info.format, info.key, info.shape, info.scan_shape) == ("cxi", f"/{CXI_DETECTOR}/data", (6, 8, 8), None)
    assert info.attrs["wavelength_A"] == pytest.approx(1.0)
    assert info.attrs["energy_eV"] == pytest.approx(12398.42)
    assert info.attrs["detector_distance_m"] == 1.12  # float32 1.12 read as 1.12
    assert info.attrs["detector_pixel_m"] == 55e-6
    raw = read_patterns(path, rows=np.array([1, 4]))
    np.testing.assert_array_equal(raw.patterns, data[[1, 4]])
    np.testing.assert_array_equal(raw.mask, mask == 0)
    assert raw.mask.sum() == 62
    np.testing.assert_allclose(raw.background, 2.0)
    assert raw.background.dtype == np.float32
    # sample at (x, y) = (i µm, -2i µm): probe centre at (y, x) = (2i µm, -i µm)
    i = np.arange(6)
    np.testing.assert_allclose(raw.positions_A, np.stack([2e4 * i, -1e4 * i], 1))


def test_cxi_data_1_link_background_and_unequal_pixels(tmp_path):
    data = counts((3, 4, 4))
    path = write_cxi(tmp_path / "d.cxi", data, **{"instrument_1/detector_1/data": None,
                                                   "instrument_1/detector_1/background": np.full((4, 4), 0.25),
                                                   "instrument_1/detector_1/x_pixel_size": 75e-6,
                                                   "instrument_1/detector_1/mask": None})
    with h5py.File(path, "a") as f:
        f["entry_1/data_1/data"] = data
    info = inspect_patterns(path)
    assert info.key == "/entry_1/data_1/data"
    assert (info.attrs["detector_pixel_y_m"], info.attrs["detector_pixel_x_m"]) == (55e-6, 75e-6)
    assert "detector_pixel_m" not in info.attrs
    raw = read_patterns(path)
    assert raw.mask is None
    np.testing.assert_array_equal(raw.background, np.full((4, 4), 0.25, np.float32))


def test_cxi_4d_patterns_give_the_scan_shape(tmp_path):
    data = counts((2, 3, 4, 4))
    path = write_cxi(tmp_path / "d.cxi", data, **{"sample_1/geometry_1/translation": np.zeros((6, 3))})
    info = inspect_patterns(path)
    assert info.scan_shape == (2, 3) and info.attrs["scan_shape"] == (2, 3)
    np.testing.assert_array_equal(read_patterns(path).patterns, data.reshape(6, 4, 4))


@pytest.mark.parametrize("extra, key, message", [
    ({"instrument_1/detector_1/data": None}, None,
     ": CXI file without patterns at entry_1/instrument_1/detector_1/data or entry_1/data_1/data; set data.key"),
    ({}, "entry_1/data", ": no dataset 'entry_1/data' (data.key); datasets: "),
    ({"instrument_1/detector_1/data": np.zeros((4, 4))}, "entry_1/instrument_1/detector_1/data",
     ":/entry_1/instrument_1/detector_1/data: expected 3D (N, ky, kx) or 4D (slow, fast, ky, kx) patterns, "
     "found shape (4, 4)"),
    ({"sample_1/geometry_1/translation": np.zeros((5, 3))}, None,
     ":entry_1/sample_1/geometry_1/translation: expected (3, 3) sample translations (x, y, z) in m, one per "
     "pattern, found shape (5, 3)"),
    ({"instrument_1/detector_1/mask": np.zeros((3, 4))}, None,
     f":{CXI_DETECTOR}/mask: expected a numeric (ky, kx) = (4, 4) image to match the patterns, found shape (3, 4)"),
    ({"instrument_1/detector_1/data_dark": np.zeros((2, 5, 4))}, None,
     f":{CXI_DETECTOR}/data_dark: expected a numeric (..., ky, kx) = (4, 4) image"),
    ({"instrument_1/detector_1/distance": -1.0}, None,
     f":{CXI_DETECTOR}/distance: expected one positive number in m, found -1.0"),
    ({"instrument_1/source_1/energy": np.bytes_("12 keV")}, None,
     ":entry_1/instrument_1/source_1/energy: expected one positive number in J, found "),
])
def test_cxi_bad_files(tmp_path, extra, key, message):
    path = write_cxi(tmp_path / "d.cxi", counts((3, 4, 4)), **extra)
    with raises(f"{path}{message}"):
        read_patterns(path, key)


# --- NumPy .npy


def test_npy_3d_and_4d(tmp_path):
    data = counts((2, 3, 4, 4)).astype(np.uint16)
    path = _npy(tmp_path / "d.npy", data)
    info = inspect_patterns(path)
    assert (info.format, info.key, info.shape, info.scan_shape, info.attrs) == (
        "npy", "", (2, 3, 4, 4), (2, 3), {"scan_shape": (2, 3)})
    raw = read_patterns(path, info.key, doubled, np.array([1, 5]))
    np.testing.assert_array_equal(raw.patterns, 2 * data.reshape(6, 4, 4)[[1, 5]])
    assert raw.positions_A is None and raw.mask is None
    flat = _npy(tmp_path / "flat.npy", data.reshape(6, 4, 4))
    assert inspect_patterns(flat).scan_shape is None


@pytest.mark.parametrize("array, key, message", [
    (np.zeros((4, 4)), None, ": expected 3D (N, ky, kx) or 4D (slow, fast, ky, kx) patterns, found shape (4, 4)"),
    (np.zeros((0, 4, 4)), None, ": is empty (shape (0, 4, 4))"),
    (np.zeros((2, 4, 4), bool), None, ": pattern values must be real numbers (measured intensities), found dtype bool"),
    (np.zeros((2, 4, 4)), "patterns", ": a .npy file holds one array, so data.key 'patterns' does not apply"),
    (np.array([{"a": 1}]), None, ": cannot be read as a .npy array (Array can't be memory-mapped"),
])
def test_npy_bad_files(tmp_path, array, key, message):
    path = _npy(tmp_path / "d.npy", array)
    with raises(f"{path}{message}"):
        read_patterns(path, key)


def test_npz_is_refused(tmp_path):
    np.savez(tmp_path / "d.npz", patterns=np.zeros((2, 4, 4)))
    (tmp_path / "d.npz").rename(tmp_path / "d.npy")
    with raises(f"{tmp_path / 'd.npy'}: expected one .npy array, found an .npz archive"):
        inspect_patterns(tmp_path / "d.npy")


# --- MATLAB .mat


def test_mat_v73_returns_matlab_orientation(tmp_path):
    """MATLAB's dp(:, :, n), 6 rows by 5 columns, is pattern n with ky = 6; h5py sees (n, 5, 6)."""
    patterns = counts((3, 6, 5))
    path = write_mat_v73(tmp_path / "d.mat", {"dp": patterns.transpose(1, 2, 0), "energy": np.array([[80e3]])})
    info = inspect_patterns(path)
    assert (info.format, info.key, info.shape, info.scan_shape) == ("mat", "/dp", (3, 6, 5), None)
    np.testing.assert_array_equal(read_patterns(path, rows=np.array([0, 2])).patterns, patterns[[0, 2]])
    as_stored = read_patterns(path, mat_transpose=False)
    np.testing.assert_array_equal(as_stored.patterns, patterns.transpose(0, 2, 1))


def test_mat_4d_keeps_matlab_scan_order(tmp_path):
    """MATLAB (ky, kx, fast, slow): linear index n = fast + n_fast * slow, as C order on (slow, fast)."""
    c_order = counts((2, 3, 4, 5))  # (slow, fast, ky, kx)
    matlab = c_order.transpose(2, 3, 1, 0)  # (ky, kx, fast, slow)
    for path in (write_mat_v73(tmp_path / "v73.mat", {"dp": matlab}), tmp_path / "v5.mat"):
        if path.name == "v5.mat":
            write_mat_v5(path, {"dp": matlab})
        info = inspect_patterns(path)
        assert (info.shape, info.scan_shape, info.attrs) == ((2, 3, 4, 5), (2, 3), {"scan_shape": (2, 3)})
        np.testing.assert_array_equal(read_patterns(path).patterns, c_order.reshape(6, 4, 5))


def test_mat_v5_through_scipy(tmp_path):
    patterns = counts((3, 6, 5)).astype(np.float64)
    path = write_mat_v5(tmp_path / "d.mat", {"dp": patterns.transpose(1, 2, 0), "energy": 80e3, "note": "a scan"})
    info = inspect_patterns(path)
    assert (info.format, info.key, info.shape) == ("mat", "dp", (3, 6, 5))
    raw = read_patterns(path, "dp", doubled, np.array([1]))
    np.testing.assert_array_equal(raw.patterns, 2 * patterns[[1]])
    np.testing.assert_array_equal(read_patterns(path, mat_transpose=False).patterns, patterns.transpose(1, 2, 0))


@pytest.mark.parametrize("version", ["v5", "v73"])
def test_mat_bad_files(tmp_path, version):
    path = tmp_path / "d.mat"
    variables = {"a": np.zeros((4, 4, 2)), "b": np.zeros((4, 4, 3)), "flat": np.zeros((4, 4))}
    if version == "v5":
        write_mat_v5(path, variables)
        names, missing, wrong = ("a, b", "no variable 'x' (data.key); variables: a [4, 4, 2] double",
                                 ":flat: expected 3D (N, ky, kx)")
    else:
        write_mat_v73(path, variables)
        names, missing, wrong = "a, b", "no dataset 'x' (data.key); datasets: a, b, flat", ":/flat: expected 3D"
    with raises(f"{path}: several {'variables' if version == 'v5' else 'datasets'} could hold the patterns ({names})"):
        inspect_patterns(path)
    with raises(f"{path}: {missing}"):
        inspect_patterns(path, "x")
    with raises(f"{path}{wrong}"):
        read_patterns(path, "flat")


def test_mat_v5_without_scipy(tmp_path, monkeypatch):
    """A v5 header is enough: the reader stops before parsing anything."""
    path = tmp_path / "d.mat"
    path.write_bytes(b"MATLAB 5.0 MAT-file, Platform: GLNXA64".ljust(116) + bytes(8) + b"\x00\x01IM")
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with raises(f"{path}: is a MATLAB v5 .mat file, which needs scipy to read: pip install scipy"):
        inspect_patterns(path)


# --- EMPAD .raw


def test_empad_default_frames(tmp_path):
    """128 x 128 pixels and two metadata rows per frame; the metadata never reaches the patterns."""
    patterns = np.random.default_rng(1).random((2, 128, 128), dtype=np.float32)
    path = write_empad(tmp_path / "scan_x2_y1.raw", patterns)
    info = inspect_patterns(path)
    assert (info.format, info.shape, info.scan_shape) == ("empad", (2, 128, 128), (1, 2))
    np.testing.assert_array_equal(read_patterns(path).patterns, patterns)
    raw = read_patterns(path, rows=np.array([1]), scan_shape=(2, 1))
    assert raw.scan_shape == (2, 1)
    np.testing.assert_array_equal(raw.patterns, patterns[[1]])


def test_empad_other_geometry(tmp_path):
    patterns = counts((6, 4, 5)).astype(np.float32)
    path = write_empad(tmp_path / "frames.raw", patterns, metadata_rows=3)
    raw = read_patterns(path, scan_shape=[2, 3], detector_shape=(4, 5), frame_rows=7)
    np.testing.assert_array_equal(raw.patterns, patterns)


def test_empad_bad_files(tmp_path):
    path = write_empad(tmp_path / "frames.raw", counts((6, 4, 4)).astype(np.float32))
    with raises(f"{path}: an EMPAD .raw file does not store its scan shape and its name has no _x<fast>_y<slow>; "
                "set data.scan_shape"):
        inspect_patterns(path)
    with raises(f"{path}: expected 864 bytes = 9 frames (scan_shape [3, 3]) of 6 x 4 float32 (detector_shape [4, 4], "
                "frame_rows 6), found 576 bytes (the size of 6 frames)"):
        read_patterns(path, scan_shape=(3, 3), detector_shape=(4, 4))
    with raises(f"{path}: an EMPAD .raw file holds one array, so data.key 'x' does not apply"):
        read_patterns(path, "x", scan_shape=(2, 2), detector_shape=(4, 4))
    empty = tmp_path / "empty.raw"
    empty.write_bytes(b"")
    with raises(f"{empty}: expected 1040 bytes = 1 frames (scan_shape [1, 1]) of 130 x 2 float32 (detector_shape "
                "[128, 2], frame_rows 130), found 0 bytes"):
        inspect_patterns(empty, scan_shape=(1, 1), detector_shape=(128, 2))


# --- convert


def test_convert_cxi_round_trip(cxi_file, tmp_path):
    path, data, mask = cxi_file
    target = tmp_path / "out" / "converted.h5"
    info, written = convert_patterns(path, target)
    assert written == ["background", "mask", "patterns", "positions_A"]
    source, back = read_patterns(path), read_patterns(target)
    assert back.format == "hdf5" and back.patterns.dtype == np.float32
    np.testing.assert_array_equal(back.patterns, data)
    np.testing.assert_array_equal(back.positions_A, source.positions_A)
    np.testing.assert_array_equal(back.mask, mask == 0)
    np.testing.assert_array_equal(back.background, source.background)
    for name in ("energy_eV", "wavelength_A", "detector_distance_m", "detector_pixel_m"):
        assert back.attrs[name] == info.attrs[name]
    assert (back.attrs["source_format"], back.attrs["source_file"]) == ("cxi", str(path))
    with h5py.File(target) as f:
        assert f["mask"].dtype == np.uint8 and f["patterns"].shape == (6, 8, 8)
    assert not list(tmp_path.glob("out/*.partial"))


def test_convert_npy_keeps_the_scan_shape(tmp_path, monkeypatch):
    data = counts((3, 4, 5, 5))
    source = _npy(tmp_path / "d.npy", data)
    monkeypatch.setattr("ptyacc.data.convert.BATCH_BYTES", 5 * 5 * 4 * 5)  # batches of 5 patterns
    convert_patterns(source, tmp_path / "d.h5")
    back = read_patterns(tmp_path / "d.h5")
    np.testing.assert_array_equal(back.patterns, data.reshape(12, 5, 5))
    assert back.scan_shape == (3, 4) and back.positions_A is None and back.mask is None
    with raises(f"{source}: scan_shape [5, 5] gives 25 positions but the file holds 12 patterns"):
        convert_patterns(source, tmp_path / "e.h5", scan_shape=(5, 5))
    assert not (tmp_path / "e.h5").exists()


def test_convert_loads_a_mat_v5_variable_once(tmp_path, monkeypatch):
    """scipy loads a v5 variable whole: converting in batches must not load it once per batch."""
    scipy_io = pytest.importorskip("scipy.io")
    patterns = counts((12, 5, 5)).astype(np.float64)
    source = write_mat_v5(tmp_path / "d.mat", {"dp": patterns.transpose(1, 2, 0)})
    monkeypatch.setattr("ptyacc.data.convert.BATCH_BYTES", 5 * 5 * 4 * 3)  # batches of 3 patterns
    loads = []
    loadmat = scipy_io.loadmat
    monkeypatch.setattr(scipy_io, "loadmat", lambda *args, **kwargs: loads.append(args) or loadmat(*args, **kwargs))
    convert_patterns(source, tmp_path / "d.h5")
    np.testing.assert_array_equal(read_patterns(tmp_path / "d.h5").patterns, patterns)
    assert len(loads) == 1


def test_convert_command(tmp_path, capsys):
    patterns = counts((4, 6, 6)).astype(np.float32)
    source = write_empad(tmp_path / "frames.raw", patterns)
    target = tmp_path / "frames.h5"
    args = ["convert", str(source), str(target), "--detector-shape", "6", "6"]
    assert main([*args, "--scan-shape", "2", "2"]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    back = read_patterns(target)
    np.testing.assert_array_equal(back.patterns, patterns)
    assert back.scan_shape == (2, 2) and back.attrs["source_format"] == "empad"
    assert main([*args, "--scan-shape", "3", "3"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"ptyacc: error: {source}: expected ") and error.count("\n") == 1
    assert main(["convert", str(target), str(target)]) == 2
    assert "is the input file" in capsys.readouterr().err


# --- a real measurement, where present


@pytest.mark.skipif(not PETRA.exists(), reason="PETRA III P25 file not present (outside the development machine)")
def test_petra_near_field_cxi():
    info = inspect_patterns(PETRA)
    assert (info.format, info.shape) == ("cxi", (200, 100, 100))
    assert info.attrs["energy_eV"] == pytest.approx(12658, rel=1e-3)
    assert info.attrs["wavelength_A"] == pytest.approx(0.9795, rel=1e-3)
    assert (info.attrs["detector_distance_m"], info.attrs["detector_pixel_m"]) == (1.12, 55e-6)
    raw = read_patterns(PETRA, rows=np.arange(0, 200, 50))
    assert raw.patterns.shape == (4, 100, 100) and raw.patterns.max() > 0
    assert (~raw.mask).sum() == 5
    assert raw.positions_A.shape == (200, 2)
    span_um = np.ptp(raw.positions_A, axis=0) * 1e-4
    assert ((span_um > 15) & (span_um < 25)).all()
