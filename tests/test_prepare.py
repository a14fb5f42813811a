"""data.transform: crop, bin, orientation and pad of the patterns, the mask and the calibration,
against NumPy references on small arrays."""

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.formats import chunks
from ptyacc.data.prepare import Preparation, orientation_from_basis
from ptyacc.errors import ConfigError, DataError

EXPERIMENT = {"energy_eV": 80e3, "dk_invA": 0.1, "scan_step_A": 0.5}


def write(path, patterns, **datasets):
    with h5py.File(path, "w") as f:
        f["patterns"] = patterns
        for key, value in datasets.items():
            f[key] = value
    return path


def load(path, transform, experiment=EXPERIMENT, **data):
    return load_data(load_config({"data": {"path": str(path), "transform": transform, **data},
                                  "experiment": experiment}))


def counts(shape, seed=0):
    return np.random.default_rng(seed).poisson(20.0, size=shape).astype(np.float32)


def test_crop_bin_flip_pad_match_numpy(tmp_path, monkeypatch):
    """Non-square stored (10 x 12) -> centred 8 x 8 crop -> 2 x 2 bins -> flip_x -> pad to 6,
    read in chunks of one pattern."""
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 10 * 12 * 4)
    stored = counts((3, 4, 10, 12))
    path = write(tmp_path / "p.h5", stored)
    data = load(path, {"crop": 8, "bin": 2, "flip_x": True, "pad": 6})
    ref = stored.reshape(12, 10, 12)[:, 5 - 4:5 + 4, 6 - 4:6 + 4]  # zero frequency (5, 6) -> (4, 4)
    ref = ref.reshape(12, 4, 2, 4, 2).sum(axis=(2, 4))[:, :, ::-1]
    padded = np.zeros((12, 6, 6), np.float32)
    padded[:, 1:5, 1:5] = ref  # (2, 2) -> (3, 3)
    np.testing.assert_array_equal(data.patterns.numpy(), np.fft.ifftshift(padded, axes=(-2, -1)))
    assert data.patterns.dtype.is_floating_point and data.patterns.numpy().dtype == np.float32
    # dk doubles by binning; dx = 1 / (K dk) with the final K = 6
    assert data.dk_invA == pytest.approx(0.2)
    assert data.dx_A == pytest.approx(1 / (6 * 0.2))
    # the padded ring is masked out, the rest counts
    expected_mask = np.zeros((6, 6), bool)
    expected_mask[1:5, 1:5] = True
    np.testing.assert_array_equal(data.mask.numpy(), np.fft.ifftshift(expected_mask))


def test_upsample_is_pad_to_a_multiple_after_bin(tmp_path):
    """upsample 3 after a 2 x 2 bin of 8 x 8 patterns: the same patterns, mask and dx as pad 12."""
    path = write(tmp_path / "p.h5", counts((2, 3, 8, 8)))
    upsampled, padded = load(path, {"bin": 2, "upsample": 3}), load(path, {"bin": 2, "pad": 12})
    np.testing.assert_array_equal(upsampled.patterns.numpy(), padded.patterns.numpy())
    np.testing.assert_array_equal(upsampled.mask.numpy(), padded.mask.numpy())
    assert upsampled.detector_px == 12 and int(upsampled.mask.sum()) == 16
    assert upsampled.dx_A == pytest.approx(1 / (3 * 4 * 0.2))  # a third of the binned patterns' dx


def test_upsample_refused_with_pad_and_in_the_near_field(tmp_path):
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)))
    with pytest.raises(ConfigError, match="data.transform.upsample: 2 pads the patterns to 2 times their size"):
        load(path, {"upsample": 2, "pad": 16})
    experiment = {"radiation": "xray", "geometry": "near_field", "energy_eV": 8000.0, "detector_distance_m": 1.0,
                  "detector_pixel_m": 1e-6, "focus_to_sample_m": 1e-2, "scan_step_A": 1e3, "check_calibration": False}
    with pytest.raises(DataError, match="upsample: 2 makes the object's pixels finer in the far field only"):
        load(path, {"upsample": 2}, experiment)


def test_crop_at_an_offset_changes_dx_and_ignores_what_is_cut(tmp_path):
    stored = counts((2, 2, 8, 8))
    stored[:, :, 0, 0] = np.nan  # outside the kept block: never seen
    path = write(tmp_path / "p.h5", stored)
    data = load(path, {"crop": 4, "crop_offset": [3, 2], "transpose": True})
    ref = stored.reshape(4, 8, 8)[:, 3:7, 2:6].transpose(0, 2, 1)
    np.testing.assert_array_equal(data.patterns.numpy(), np.fft.ifftshift(ref, axes=(-2, -1)))
    assert data.dx_A == pytest.approx(1 / (4 * 0.1))  # dk kept, K 8 -> 4
    assert data.mask is None


def test_dx_given_for_the_stored_patterns(tmp_path):
    """experiment.dx_A describes the stored patterns: dk = 1 / (8 * 0.25), binned by 2."""
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)))
    experiment = {**EXPERIMENT, "dk_invA": None, "dx_A": 0.25}
    data = load(path, {"bin": 2}, experiment)
    assert data.dk_invA == pytest.approx(2 / (8 * 0.25))
    assert data.dx_A == pytest.approx(0.25)  # crop-free binning: K / 2 and dk * 2 cancel


def test_mask_follows_crop_bin_and_orientation(tmp_path):
    """A bad stored pixel spoils the whole bin it falls in; NumPy reference of the geometry."""
    good = np.ones((8, 8), bool)
    good[3, 6] = False
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)), mask=good.astype(np.uint8))
    data = load(path, {"crop": 6, "bin": 2, "flip_y": True})  # crop rows/cols 1..6
    ref = good[1:7, 1:7].reshape(3, 2, 3, 2).all(axis=(1, 3))[::-1, :]
    assert not ref.all()
    np.testing.assert_array_equal(data.mask.numpy(), np.fft.ifftshift(ref))


def test_xray_far_field_binning_scales_the_detector_pixel(tmp_path):
    """dx = lambda z / (K * bin * p), K the final size."""
    path = write(tmp_path / "p.h5", counts((2, 2, 16, 16)))
    experiment = {"radiation": "xray", "energy_eV": 8000.0, "detector_distance_m": 2.0, "detector_pixel_m": 75e-6,
                  "scan_step_A": 1e3, "check_calibration": False}  # a scan of a third of a pixel
    data = load(path, {"crop": 12, "bin": 3}, experiment)
    assert data.patterns.shape == (4, 4, 4)
    assert data.dx_A == pytest.approx(data.wavelength_A * 2.0 / (4 * 3 * 75e-6))


def test_near_field_binning_scales_the_image_pixel(tmp_path):
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)))
    experiment = {"radiation": "xray", "geometry": "near_field", "energy_eV": 8000.0, "detector_distance_m": 1.0,
                  "detector_pixel_m": 1e-6, "focus_to_sample_m": 1e-2, "scan_step_A": 1e3,
                  "check_calibration": False}  # a scan of a twentieth of a pixel
    data = load(path, {"bin": 2, "pad": 6}, experiment)
    ref = np.zeros((4, 6, 6), np.float32)
    ref[:, 1:5, 1:5] = counts((2, 2, 8, 8)).reshape(4, 4, 2, 4, 2).sum(axis=(2, 4))
    np.testing.assert_array_equal(data.patterns.numpy(), ref)  # near field: not ifftshifted
    assert data.dx_A == pytest.approx(2 * 1e-6 * 1e10 / 101)


@pytest.mark.parametrize("transform, message", [
    ({"crop": 10}, "data.transform.crop: a 10 x 10 crop centred does not fit in the stored 8 x 8 patterns"),
    ({"crop": 4, "crop_offset": [5, 0]}, "a 4 x 4 crop at offset [5, 0] does not fit"),
    ({"bin": 3}, "data.transform.bin: 3 does not divide the stored pattern size 8 x 8"),
    ({"crop": 6, "bin": 4}, "data.transform.bin: 4 does not divide the cropped pattern size 6 x 6"),
    ({"bin": 2, "pad": 3}, "data.transform.pad: 3 is smaller than the 4 x 4 px patterns after crop and bin"),
])
def test_transform_that_does_not_fit_names_file_and_key(tmp_path, transform, message):
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)))
    with pytest.raises(DataError) as info:
        load(path, transform)
    assert message in str(info.value) and str(path) in str(info.value)


def test_non_square_patterns_can_be_cropped_square(tmp_path):
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 6)))
    with pytest.raises(DataError, match="patterns must be square, found 8 x 6; crop them with data.transform.crop"):
        load(path, {})
    assert load(path, {"crop": 6}).patterns.shape == (4, 6, 6)


PETRA = Path(__file__).resolve().parents[1] / "examples" / "data" / "PETRAIII_P25_Near_Field_Ptycho.cxi"
PETRA_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "petra_nearfield.yaml"
AXES = [(axis, sign) for axis in ("x", "y") for sign in (1, -1)]


@pytest.mark.parametrize("rows, cols", [(r, c) for r in AXES for c in AXES if r[0] != c[0]])
def test_orientation_from_basis_vectors_recovers_the_lab_image(rows, cols):
    """A detector whose rows and columns point along +-x / +-y of the lab records a lab image
    L[y, x] as D; the derived transpose and flips (applied as data.transform applies them)
    give L back, for all 8 axis-aligned detectors."""
    k, pixel = 5, 55e-6
    lab = np.arange(k * k, dtype=np.float32).reshape(k, k)
    basis = np.zeros((3, 2))
    for column, (axis, sign) in enumerate((rows, cols)):
        basis["xy".index(axis), column] = sign * pixel
    i, j = np.indices((k, k))
    along = {rows[0]: i if rows[1] > 0 else k - 1 - i, cols[0]: j if cols[1] > 0 else k - 1 - j}
    detector = lab[along["y"], along["x"]]
    flags = orientation_from_basis(basis, "f.cxi")
    prep = Preparation((k, k), (0, 0), (k, k), 1, flags["transpose"], flags["flip_y"], flags["flip_x"], None, False)
    np.testing.assert_array_equal(prep.orient_and_pad(detector[None])[0], lab)
    assert orientation_from_basis(basis.T, "f.cxi") == flags  # (2, 3) layout read the same


def test_auto_orientation_of_the_petra_file_equals_its_config():
    """configs/petra_nearfield.yaml sets flip_y and flip_x by hand; auto derives the same from the
    CXI basis vectors, and reads the same patterns and mask."""
    with h5py.File(PETRA) as f:
        basis = f["entry_1/instrument_1/detector_1/basis_vectors"][()]
    by_hand = yaml.safe_load(PETRA_CONFIG.read_text())["data"]["transform"]
    flags = orientation_from_basis(basis, str(PETRA))
    assert flags == {"transpose": by_hand.get("transpose", False), "flip_y": by_hand["flip_y"],
                     "flip_x": by_hand["flip_x"]} == {"transpose": False, "flip_y": True, "flip_x": True}
    manual = load_data(load_config(PETRA_CONFIG))
    auto = load_data(load_config(PETRA_CONFIG, ["data.transform.flip_y=false", "data.transform.flip_x=false",
                                                "data.transform.orientation=auto"]))
    assert torch.equal(auto.patterns, manual.patterns) and torch.equal(auto.mask, manual.mask)


@pytest.mark.parametrize("basis, message", [
    ([[1e-5, 1e-5], [1e-5, -1e-5], [0, 0]], "array axis 0 points along [1e-05, 1e-05, 0.0] (x, y, z), not along lab x or y"),
    ([[0, 1e-5], [0, 0], [1e-5, 0]], "array axis 0 points along [0.0, 0.0, 1e-05]"),
    ([[1e-5, -1e-5], [0, 0], [0, 0]], "both array axes point along lab x"),
    ([[1e-5, 0, 0, 0]], "expected a (3, 2) array of finite lab vectors"),
])
def test_orientation_from_bad_basis_vectors(basis, message):
    with pytest.raises(DataError) as info:
        orientation_from_basis(basis, "scan.cxi")
    assert message in str(info.value) and "scan.cxi" in str(info.value)
    assert "set data.transform transpose, flip_y and flip_x by hand" in str(info.value)


def test_auto_orientation_without_basis_vectors(tmp_path):
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)))
    with pytest.raises(DataError, match="orientation: auto needs the detector's basis_vectors"):
        load(path, {"orientation": "auto"})


@pytest.mark.parametrize("k", [6, 7])
def test_a_flip_about_the_zero_frequency_is_k_to_minus_k(k):
    """A flip about the zero frequency gives the far-field pattern at -k (model layout: index -i
    modulo k, checked against NumPy's indexing), the mask the same; reversing differs by a pixel on an
    even size only. ``keeping_centre`` turns an axis only where the reversed disk lies over half a
    pixel below the zero frequency, and never on an odd size."""
    stored = np.arange(2 * k * k, dtype=np.float32).reshape(2, k, k)
    plain = Preparation((k, k), (0, 0), (k, k), 1, True, True, True, None, True)
    about = dataclasses.replace(plain, flip_about_zero=(True, True))
    transposed = np.fft.ifftshift(stored.transpose(0, 2, 1), axes=(-2, -1))
    minus = -np.arange(k) % k
    np.testing.assert_array_equal(about.orient_and_pad(stored), transposed[:, minus][:, :, minus])
    assert np.array_equal(plain.orient_and_pad(stored), about.orient_and_pad(stored)) == (k % 2 == 1)
    mask = np.ones((k, k), dtype=bool)
    mask[0, 1] = False
    np.testing.assert_array_equal(about.mask(mask), np.fft.ifftshift(mask.T)[minus][:, minus])
    # a disk found (y, x) = (-1, 0) px off before orientation: (0, -1) after the transpose; turning y keeps
    # it at 0, reversing x brings -1 to 0 (an odd size reverses both: -o either way)
    assert plain.keeping_centre((-1.0, 0.0)).flip_about_zero == ((True, False) if k % 2 == 0 else (False, False))
    assert plain.centre_after((-1.0, 0.0))[0] == ((0.0, 0.0) if k % 2 == 0 else (0.0, 1.0))
    unflipped_y = dataclasses.replace(plain, flip_y=False)
    assert unflipped_y.centre_after((0.3, 0.0))[0] == pytest.approx((0.0, -0.3))
