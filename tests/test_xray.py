"""X-ray geometries: calibration, near-field recovery with Poisson noise, the deviance metric."""

import numpy as np
import pytest
import torch

import ptyacc
from ptyacc.data.sampling import xray_sampling
from ptyacc.data.store import PatternStore
from ptyacc.errors import ConfigError
from ptyacc.reconstruction.engine import poisson_deviance_sums
from ptyacc.results.quality import scanned_region


def test_far_and_near_field_sampling():
    """Far field dx = lambda z / (K p); near field (Fresnel scaling) dx = p / M, z_eff = z2 / M."""
    dx, near = xray_sampling("far_field", 1.0, 100, 2.0, 50e-6, None)
    assert dx == pytest.approx(1.0 * 2.0 / (100 * 50e-6)) and near is None
    dx, near = xray_sampling("near_field", 0.979, 100, 1.12, 55e-6, 3.65e-3)
    magnification = (3.65e-3 + 1.12) / 3.65e-3
    assert magnification == pytest.approx(307.8, rel=1e-3)
    assert dx == pytest.approx(55e-6 * 1e10 / magnification) and near == pytest.approx(1.12e10 / magnification)
    with pytest.raises(ConfigError, match="experiment.focus_to_sample_m"):
        xray_sampling("near_field", 0.979, 100, 1.12, 55e-6, None)
    with pytest.raises(ConfigError, match="detector_distance_m and experiment.detector_pixel_m"):
        xray_sampling("far_field", 0.979, 100, None, 55e-6, None)


def test_simulated_xray_data_take_the_given_dk():
    """A simulated far-field X-ray dataset with experiment.dk_invA and no detector geometry has
    dx = 1 / (K dk), as data read from a file would."""
    from ptyacc.data import load_data

    config = ptyacc.load_config({"data": {"simulate": {"scan_shape": [2, 2], "detector_px": 16, "atoms": 2}},
                                 "experiment": {"radiation": "xray", "energy_eV": 8000.0, "dk_invA": 2.5e-4,
                                                "scan_step_A": 800.0}})
    assert load_data(config).dx_A == pytest.approx(1 / (16 * 2.5e-4))


def test_sampling_chain_against_its_formulas():
    """dx_A, else dk_invA, else the bright-field disk (dk = semiangle / wavelength / R), else the
    X-ray geometry; near field the geometry always gives the propagation distance."""
    from ptyacc.data.sampling import aperture_invA, object_sampling

    k, wavelength = 64, 0.0418
    assert aperture_invA(20.0, wavelength) == pytest.approx(0.020 / 0.0418)
    assert object_sampling(k, wavelength, dx_A=0.3, dk_invA=9.0).dx_A == 0.3
    assert object_sampling(k, wavelength, dk_invA=0.05, disk_radius_px=3.0, semiangle_mrad=20.0).dx_A == \
        pytest.approx(1 / (64 * 0.05))
    disk = object_sampling(k, wavelength, disk_radius_px=9.5, semiangle_mrad=20.0)
    assert disk.dx_A == pytest.approx(1 / (64 * (0.020 / 0.0418 / 9.5))) and disk.near_field_distance_A is None
    far = object_sampling(k, 1.5, radiation="xray", detector_distance_m=2.0, detector_pixel_m=75e-6)
    assert far.dx_A == pytest.approx(1.5 * 2.0 / (64 * 75e-6))
    near = object_sampling(k, 1.0, dk_invA=1e-3, radiation="xray", geometry="near_field", detector_distance_m=1.0,
                           detector_pixel_m=1e-6, focus_to_sample_m=1e-2)
    assert near.dx_A == pytest.approx(1 / (64 * 1e-3)) and near.near_field_distance_A == pytest.approx(1e10 / 101)
    with pytest.raises(ConfigError, match="experiment.dk_invA: needed"):
        object_sampling(k, wavelength, disk_radius_px=9.5)  # a disk without the semi-angle says nothing


XRAY_SIMULATION = {"data": {"simulate": {"scan_shape": [3, 3], "detector_px": 16, "atoms": 4}}}
FAR_FIELD = {"radiation": "xray", "energy_eV": 8000.0, "detector_distance_m": 2.0, "detector_pixel_m": 75e-6,
             "scan_step_A": 2000.0}
NEAR_FIELD = {"radiation": "xray", "geometry": "near_field", "energy_eV": 12660.0, "detector_distance_m": 1.12,
              "detector_pixel_m": 55e-6, "focus_to_sample_m": 3.65e-3, "scan_step_A": 15000.0}


@pytest.mark.parametrize("experiment", [FAR_FIELD, NEAR_FIELD], ids=["far_field", "near_field"])
def test_exported_xray_data_read_back_as_simulated(tmp_path, experiment):
    """write_dataset of simulated X-ray data says radiation xray and the photon energy; read back
    with the same experiment (positions from the file) it gives the same patterns (near-field
    images are stored as they are, diffraction patterns centred), wavelength and pixel."""
    import h5py

    from ptyacc.data import load_data
    from ptyacc.data.export import write_dataset

    simulated = load_data(ptyacc.load_config({**XRAY_SIMULATION, "experiment": experiment}))
    write_dataset(tmp_path / "x.h5", simulated)
    with h5py.File(tmp_path / "x.h5") as f:
        assert f.attrs["radiation"] == "xray"
        assert f.attrs["energy_eV"] == pytest.approx(experiment["energy_eV"], rel=1e-9)
    again = load_data(ptyacc.load_config({"data": {"path": str(tmp_path / "x.h5")},
                                          "experiment": {**experiment, "positions": {"key": "positions_A"}}}))
    np.testing.assert_array_equal(again.patterns.numpy(), simulated.patterns.numpy())
    assert again.wavelength_A == pytest.approx(simulated.wavelength_A, rel=1e-12)
    assert again.dx_A == pytest.approx(simulated.dx_A, rel=1e-12) and again.overrides == ()


def test_near_field_needs_xray():
    with pytest.raises(ConfigError, match="experiment.geometry: near_field needs radiation: xray"):
        ptyacc.load_config(None, ["experiment.geometry=near_field"])


def test_near_field_image_stays_on_the_detector_grid():
    """Near field the beam and the detector stay put while the sample moves: through a flat
    object, the image of a probe that the model shifts by a sub-pixel rest s (to meet the
    object's pixel grid) and whose image ``Detector`` shifts back by -s is the unshifted
    probe's image, computed here with NumPy's FFT and its own Fresnel kernel; without the
    shift back it moves with s. A shifted back field is also the NumPy one shifted by -s."""
    from ptyacc.physics import Detector, fresnel_propagator, shift_ramp

    k, dx, wavelength, distance = 32, 2.0, 0.5, 40.0
    rng = np.random.default_rng(1)
    c = np.arange(k) - k // 2
    probe = np.exp(-(c[:, None] ** 2 + c[None, :] ** 2) / 60.0 + 1j * rng.normal(0, 0.3, (k, k)))
    f = np.fft.fftfreq(k, dx)
    kernel = np.exp(-1j * np.pi * wavelength * distance * (f[:, None] ** 2 + f[None, :] ** 2))
    image = np.fft.ifft2(np.fft.fft2(probe) * kernel)
    shifts = torch.tensor([[0.3, -0.4], [-0.5, 0.25]], dtype=torch.float64)
    ramps = shift_ramp(shifts, k)
    shifted_probes = torch.fft.ifft2(torch.fft.fft2(torch.from_numpy(probe)) * ramps)  # (2, K, K)
    detector = Detector(propagator=fresnel_propagator(k, dx, wavelength, distance, torch.complex128))
    held = detector.field(shifted_probes, ramps).numpy()
    np.testing.assert_allclose(np.abs(held) ** 2, np.broadcast_to(np.abs(image) ** 2, (2, k, k)), atol=1e-12)
    moved = np.abs(detector.field(shifted_probes).numpy()) ** 2
    assert np.abs(moved - np.abs(image) ** 2).max() > 0.05 * (np.abs(image) ** 2).max()
    for n, (sy, sx) in enumerate(shifts.numpy()):
        back = np.exp(2j * np.pi * (sy * np.fft.fftfreq(k)[:, None] + sx * np.fft.fftfreq(k)[None, :]))
        expected = np.fft.ifft2(np.fft.fft2(detector.field(shifted_probes[n:n + 1]).numpy()[0]) * back)
        np.testing.assert_allclose(held[n], expected, atol=1e-12)
    grad = torch.from_numpy(rng.normal(size=(2, 3, k, k)) + 1j * rng.normal(size=(2, 3, k, k)))
    waves = torch.from_numpy(rng.normal(size=(2, 3, k, k)) + 1j * rng.normal(size=(2, 3, k, k)))
    # adjoint: <field(w), g> == <w, adjoint(g)> with modes between batch and pixels
    lhs = torch.vdot(detector.field(waves, ramps).reshape(-1), grad.reshape(-1))
    rhs = torch.vdot(waves.reshape(-1), detector.adjoint(grad, ramps).reshape(-1))
    assert complex(lhs) == pytest.approx(complex(rhs), rel=1e-12)


class FixedModel:
    """Stands in for a model: predicts the same intensities for every index."""

    def __init__(self, prediction, mask):
        self.prediction, self.detector_mask = prediction, mask

    def __call__(self, indices):
        return self.prediction.expand(len(indices), *self.prediction.shape)


def test_poisson_deviance_against_numpy():
    """sum over unmasked pixels of (m - I log m) - (I - I log I), and the count of values >= 1."""
    rng = np.random.default_rng(0)
    model_i = rng.uniform(0.1, 20, (6, 6))
    measured = rng.poisson(model_i, (5, 6, 6)).astype(float)
    mask = (rng.random((6, 6)) > 0.2).astype(float)
    store = PatternStore(torch.tensor(measured), None, 5)
    sums = poisson_deviance_sums(FixedModel(torch.tensor(model_i), torch.tensor(mask)), store, torch.arange(5), chunk=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        i_log_i = np.where(measured > 0, measured * np.log(measured), 0.0)
    expected = (((model_i - measured * np.log(model_i)) - (measured - i_log_i)) * mask).sum()
    assert float(sums[0]) == pytest.approx(expected, rel=1e-10)
    assert float(sums[1]) == ((measured >= 1) * mask).sum()
    assert float(sums[3]) == pytest.approx((measured * mask).sum(), rel=1e-12)  # the counts, for the misfit


@pytest.mark.slow
def test_near_field_recovery_with_background_and_weights():
    """Fresnel-scaled near-field data (PETRA-like geometry, 12.66 keV, 1e6 photons per image,
    Poisson): the phase correlates with the truth (measured 0.66 after 40 iterations; a wrong
    propagation distance or sign leaves it near 0) and the deviance per counted pixel comes out
    near the noise level of 1 (measured 0.96)."""
    config = ptyacc.load_config({
        "data": {"simulate": {"scan_shape": [6, 6], "detector_px": 64, "dose": 1e6, "atoms": 150,
                              "atom_phase_rad": 0.5, "seed": 4}},
        "experiment": {"radiation": "xray", "geometry": "near_field", "energy_eV": 12660, "detector_distance_m": 1.12,
                       "detector_pixel_m": 55e-6, "focus_to_sample_m": 3.65e-3, "scan_step_A": 15000},
        "model": {"background": True, "intensity_weights": True},
        "optim": {"iterations": 40, "batch_size": 6, "loss": "poisson", "lr": {"object": 2e-2}},
        "runtime": {"progress": False, "threads": 2}})
    rec = ptyacc.reconstruct(config, write=False)
    truth = rec.data.ground_truth
    rows, cols = scanned_region(truth["geometry"].positions_px)
    correlation = np.corrcoef(truth["phase"].sum(0)[rows, cols].ravel(), rec.results.phase[rows, cols].ravel())[0, 1]
    assert correlation > 0.6, correlation
    assert 0.5 < rec.poisson_deviance < 1.2
    assert rec.model.background is not None and float(rec.model.background.min()) >= 0


@pytest.mark.slow
def test_petra_near_field_data_reconstructs(tmp_path):
    """The real PETRA III P25 near-field data with configs/petra_nearfield.yaml, 20 iterations:
    the deviance per counted pixel falls from the flat-object start to below 12 (measured 8.5;
    the 100-iteration config reaches 5.27, CDTools 0.3.2's example 5.41; with the near-field
    image not shifted back by the probe's sub-pixel shift 22.8 here and 18.4 for the config;
    with the detector orientation not corrected it stalls near 74), and the bad pixels of the
    CXI mask are left out."""
    from pathlib import Path

    root = Path(__file__).parents[1]
    config = ptyacc.load_config(root / "configs" / "petra_nearfield.yaml",
                                [f"output.dir={tmp_path}", "optim.iterations=20", "runtime.progress=false",
                                 "output.figures=false"])
    rec = ptyacc.reconstruct(config)
    assert rec.data.near_field_distance_A == pytest.approx(1.12e10 * 3.65e-3 / (3.65e-3 + 1.12), rel=1e-3)
    assert int((~rec.data.mask).sum()) == 5
    assert rec.poisson_deviance < 12, rec.poisson_deviance
    saved = ptyacc.load_results(tmp_path / "results.h5")
    assert saved.attrs["poisson_deviance"] == pytest.approx(rec.poisson_deviance)


def test_fused_near_field_loss_with_shifted_probes_matches_autograd():
    """``ptycho_loss`` in the near field, with sub-pixel probe shifts undone at the detector:
    value and gradients (probe, object, positions through the ramps, weights, background) equal
    autograd through ``far_field_loss``, the plain reference, for both losses and 1 or 2 modes."""
    from ptyacc.physics import Detector, exit_waves, extract_patches, far_field_loss, fresnel_propagator, ptycho_loss, shift_ramp

    torch.manual_seed(0)
    k, b = 16, 5
    detector = Detector(propagator=fresnel_propagator(k, 1.0, 1.0, 3.0, torch.complex128),
                        mask=(torch.rand(k, k) > 0.1).double())
    for kind, modes in (("poisson", 1), ("amplitude", 2)):
        probe = torch.randn(modes, k, k, dtype=torch.complex128).requires_grad_()
        obj = (1 + 0.3 * torch.randn(1, 1, 40, 40, dtype=torch.complex128)).requires_grad_()
        centres = (10 + 20 * torch.rand(b, 2, dtype=torch.float64)).requires_grad_()
        top_left = torch.round(centres.detach() - k // 2).long()
        measured = 5 * torch.rand(b, k, k, dtype=torch.float64)
        weights = (1 + 0.1 * torch.rand(b, dtype=torch.float64)).requires_grad_()
        background = (0.1 * torch.rand(k, k, dtype=torch.float64)).requires_grad_()
        results = []
        for fused in (True, False):
            ramps = shift_ramp(centres - k // 2 - top_left, k)
            if fused:
                loss = ptycho_loss(probe, obj, top_left, ramps, None, measured, kind, chunk=2, detector=detector,
                                   weights=weights, background=background)
            else:
                probes = torch.fft.ifft2(torch.fft.fft2(probe) * ramps[:, None])
                waves = exit_waves(probes, extract_patches(obj, top_left, k), None)
                loss = far_field_loss(waves, measured, kind, detector, weights, background, ramps=ramps)
            results.append((loss.detach(), torch.autograd.grad(loss, (probe, obj, centres, weights, background))))
        (loss_fused, grads_fused), (loss_ref, grads_ref) = results
        assert float(loss_fused) == pytest.approx(float(loss_ref), rel=1e-12)
        for got, expected in zip(grads_fused, grads_ref, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10 * float(expected.abs().max()))
