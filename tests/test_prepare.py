"""data.transform: crop, bin, orientation and pad of the patterns, the mask and the calibration,
against NumPy references on small arrays."""

import h5py
import numpy as np
import pytest

from ptyacc.config import load_config
from ptyacc.data import formats, load_data
from ptyacc.errors import DataError

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
    monkeypatch.setattr(formats, "CHUNK_BYTES", 10 * 12 * 4)
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
                  "scan_step_A": 1e3}
    data = load(path, {"crop": 12, "bin": 3}, experiment)
    assert data.patterns.shape == (4, 4, 4)
    assert data.dx_A == pytest.approx(data.wavelength_A * 2.0 / (4 * 3 * 75e-6))


def test_near_field_binning_scales_the_image_pixel(tmp_path):
    path = write(tmp_path / "p.h5", counts((2, 2, 8, 8)))
    experiment = {"radiation": "xray", "geometry": "near_field", "energy_eV": 8000.0, "detector_distance_m": 1.0,
                  "detector_pixel_m": 1e-6, "focus_to_sample_m": 1e-2, "scan_step_A": 1e3}
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
