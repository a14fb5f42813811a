"""data.flat_field: every pattern divided by the detector's gain as stored, before data.transform,
against NumPy on small arrays; pixels without a usable gain left out; a gain of the wrong shape refused."""

import h5py
import numpy as np
import pytest

from ptyacc.errors import DataError
from tests.test_prepare import counts, load, write


def gain_image(shape, seed=1):
    gain = np.random.default_rng(seed).uniform(0.5, 2.0, size=shape)
    gain[2, 3] = 0.0  # a dead pixel of the flat field
    gain[7, 8] = np.nan
    return gain


@pytest.mark.parametrize("kind", ["npy", "h5"])
def test_patterns_divided_by_the_gain_before_crop_bin_and_flip(tmp_path, kind):
    stored = counts((3, 4, 10, 12))
    path = write(tmp_path / "p.h5", stored)
    gain = gain_image((10, 12))
    if kind == "npy":
        np.save(tmp_path / "gain.npy", gain)
        flat = {"flat_field": str(tmp_path / "gain.npy")}
    else:
        with h5py.File(tmp_path / "gain.h5", "w") as f:
            f["detector/gain"] = gain
        flat = {"flat_field": str(tmp_path / "gain.h5"), "flat_field_key": "detector/gain"}
    data = load(path, {"crop": 8, "bin": 2, "flip_x": True}, **flat)
    usable = np.isfinite(gain) & (gain > 0)
    corrected = np.where(usable, stored.reshape(12, 10, 12) / np.where(usable, gain, 1.0), 0.0)
    ref = corrected[:, 1:9, 2:10].reshape(12, 4, 2, 4, 2).sum(axis=(2, 4))[:, :, ::-1]
    np.testing.assert_allclose(data.patterns.numpy(), np.fft.ifftshift(ref, axes=(-2, -1)), rtol=1e-5)
    # a binned pixel holding a pixel without a usable gain is left out of the loss
    good = usable[1:9, 2:10].reshape(4, 2, 4, 2).all(axis=(1, 3))[:, ::-1]
    np.testing.assert_array_equal(data.mask.numpy(), np.fft.ifftshift(good))
    assert not good.all()
    plain = load(path, {"crop": 8, "bin": 2, "flip_x": True})
    assert not np.allclose(plain.patterns.numpy(), data.patterns.numpy())


def test_a_gain_of_another_shape_is_refused_with_both_shapes(tmp_path):
    path = write(tmp_path / "p.h5", counts((2, 2, 10, 12)))
    np.save(tmp_path / "gain.npy", np.ones((12, 10)))
    with pytest.raises(DataError, match=r"data.flat_field: .*gain.npy.*\[12, 10\].*10 x 12 px as stored"):
        load(path, {}, flat_field=str(tmp_path / "gain.npy"))
    with h5py.File(tmp_path / "gain.h5", "w") as f:
        f["gain"] = np.ones((10, 12))
    with pytest.raises(DataError, match="no dataset 'flat_field'.*data.flat_field_key"):
        load(path, {}, flat_field=str(tmp_path / "gain.h5"))
