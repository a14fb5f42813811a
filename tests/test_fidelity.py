"""The data fidelity: the hand-written gradient of the loss terms against autograd through the
reference loss, and the Poisson deviance against NumPy."""

import numpy as np
import pytest
import torch

from ptyacc.physics import detector_response, deviance_sums, intensity_loss_terms, loss_from_intensities
from ptyacc.physics.chain import POISSON_CAP_SPARED_COUNTS, POISSON_PULL_CAP, poisson_nll
from ptyacc.physics.deviance import saturated_sums


@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("with_extras", [False, True])
def test_loss_terms_match_autograd_of_the_reference(kind, with_extras):
    """Value, d loss / d far = factor * far, and the weights' and background's gradients equal
    autograd through ``detector_response`` and ``loss_from_intensities``, with a mask."""
    g = torch.Generator().manual_seed(0)
    far = torch.complex(torch.randn(3, 2, 6, 6, generator=g, dtype=torch.float64),
                        torch.randn(3, 2, 6, 6, generator=g, dtype=torch.float64)).requires_grad_()
    measured = torch.poisson(3 * torch.rand(3, 6, 6, generator=g, dtype=torch.float64), generator=g)
    weights = (0.5 + torch.rand(3, generator=g, dtype=torch.float64)).requires_grad_() if with_extras else None
    background = (0.2 * torch.rand(6, 6, generator=g, dtype=torch.float64)).requires_grad_() if with_extras else None
    mask = (torch.rand(6, 6, generator=g) > 0.25).double() if with_extras else None
    coherent = (far.real.square() + far.imag.square()).sum(1)
    loss, factor, grad_weights, grad_background = intensity_loss_terms(coherent.detach(), measured, kind, weights,
                                                                       background, mask)
    per_pixel = loss_from_intensities(detector_response(coherent, weights, background), measured, kind, reduce=False)
    reference = (per_pixel if mask is None else per_pixel * mask).sum()
    inputs = [far] + ([weights, background] if with_extras else [])
    expected = torch.autograd.grad(reference, inputs)
    assert float(loss.detach()) == pytest.approx(float(reference.detach()), rel=1e-13)
    torch.testing.assert_close(factor[:, None] * far.detach(), expected[0], rtol=1e-12, atol=1e-12)
    if with_extras:
        torch.testing.assert_close(grad_weights, expected[1], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad_background, expected[2], rtol=1e-12, atol=1e-12)
    else:
        assert grad_weights is None and grad_background is None



@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_loss_factor_has_the_bits_of_the_plain_formula(kind, with_mask):
    """The factor 2 dL/dI (one ``addcdiv`` per chunk) equals, bit for bit, 2 (1 - r) made in separate passes with
    r = sqrt(M) / sqrt(I) or M / I, in float32 over counts of every size: the demo's runs depend on it."""
    g = torch.Generator().manual_seed(1)
    coherent = torch.rand(4, 32, 32, generator=g) ** 4 * torch.logspace(-3, 6, 4)[:, None, None]
    measured = torch.poisson(coherent * 1.5 + 0.2, generator=g)
    mask = (torch.rand(32, 32, generator=g) > 0.1).float() if with_mask else None
    _, factor, _, _ = intensity_loss_terms(coherent, measured, kind, mask=mask)
    intensity = coherent + (1e-8 if kind == "amplitude" else 0.01)
    ratio = (torch.sqrt(measured) / torch.sqrt(intensity) if kind == "amplitude"
             else measured / torch.maximum(intensity, (measured - POISSON_CAP_SPARED_COUNTS) * (1.0 / POISSON_PULL_CAP)))
    if kind == "poisson":  # the cap is met here
        assert (measured / intensity > ratio).any()
    expected = 2.0 * (1.0 - ratio) if mask is None else 2.0 * ((1.0 - ratio) * mask)
    assert torch.equal(factor, expected)


def test_the_poisson_loss_is_the_likelihood_within_its_cap_and_its_tangent_below():
    """I - M log I (NumPy) wherever the model intensity I is at least the cap C = (M - 1) / POISSON_PULL_CAP; below
    it the tangent at C, so that the pull 1 - M / max(I, C) is at most POISSON_PULL_CAP M / (M - 1) - 1 in size; a
    single count is never capped. Continuous with its slope across the cap (finite differences either side), and
    the hand-written gradient is autograd's on both sides."""
    cap, spared = POISSON_PULL_CAP, POISSON_CAP_SPARED_COUNTS
    assert spared == 1.0
    measured = torch.tensor([0.0, 1.0, 1.0, 40.0, 40.0, 40.0, 1e4], dtype=torch.float64)
    intensity = torch.tensor([0.3, 2.0, 1e-3, 80.0, 39.0 / cap * 1.5, 39.0 / cap / 7, 1e4 / cap / 100],
                             dtype=torch.float64)
    m, i = measured.numpy(), intensity.numpy()
    corner = np.maximum(i, (m - 1) / cap)
    expected = corner - np.where(m > 0, m * np.log(corner), 0.0) + (1 - m / corner) * (i - corner)
    np.testing.assert_allclose(poisson_nll(intensity, measured).numpy(), expected, rtol=1e-14)
    within = i >= (m - 1) / cap  # the likelihood itself: a single count at 1e-3 too
    assert within.tolist() == [True, True, True, True, True, False, False]
    np.testing.assert_allclose(expected[within], (i - m * np.log(i))[within], rtol=1e-14)
    # continuous, with the likelihood's slope 1 - M / I above the cap and the tangent's 1 - M / C below
    at, h, forty = torch.tensor([39.0 / cap], dtype=torch.float64), 1e-7, torch.tensor([40.0], dtype=torch.float64)
    for side in (+1, -1):
        step = (poisson_nll(at + side * h, forty) - poisson_nll(at, forty)) / (side * h)
        assert float(step) == pytest.approx(1 - 40.0 / (39.0 / cap), rel=1e-5)
    _, factor, _, _ = intensity_loss_terms(intensity - 0.01, measured, "poisson")  # the loss adds its floor 0.01
    np.testing.assert_allclose(factor.numpy(), 2 * (1 - m / corner), rtol=1e-12)
    # many counts on a dark model pull with the cap's 1 - cap M / (M - 1); a single count keeps its 1 - M / I
    assert float(factor[-1]) == pytest.approx(2 * (1 - cap * 1e4 / (1e4 - 1)))
    assert float(factor[2]) == pytest.approx(2 * (1 - 1 / 1e-3))
    coherent = (intensity - 0.01).requires_grad_()
    reference = loss_from_intensities(coherent, measured, "poisson")
    np.testing.assert_allclose(torch.autograd.grad(reference, coherent)[0].numpy(), factor.numpy() / 2, rtol=1e-12)


@pytest.mark.parametrize("with_mask", [False, True])
def test_deviance_sums_against_numpy(with_mask):
    """sum of (m - I log m) - (I - I log I) with 0 log 0 = 0, over counted pixels, and the
    number of pixel values >= 1; zero counts and a float32 prediction included."""
    rng = np.random.default_rng(3)
    model = rng.uniform(0.05, 8, (4, 6, 6))
    measured = rng.poisson(model).astype(float)
    measured[0, 0, :3] = 0.0
    mask = (rng.random((6, 6)) > 0.2).astype(float) if with_mask else np.ones((6, 6))
    sums = deviance_sums(torch.tensor(model, dtype=torch.float32), torch.tensor(measured, dtype=torch.float32),
                         torch.tensor(mask, dtype=torch.float32) if with_mask else None)
    model32 = model.astype(np.float32).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        i_log_i = np.where(measured > 0, measured * np.log(measured), 0.0)
    expected = (((model32 - measured * np.log(model32)) - (measured - i_log_i)) * mask).sum()
    assert sums.dtype == torch.float64 and sums.shape == (2,)
    assert float(sums[0]) == pytest.approx(expected, rel=1e-12)
    assert float(sums[1]) == ((measured >= 1) * mask).sum()


@pytest.mark.parametrize("with_mask", [False, True])
def test_saturated_sums_against_numpy(with_mask):
    """sum of I - I log I (0 log 0 = 0) and the number of pixel values >= 1 over the mask; with
    them, a loss summed over the same pixels gives the deviance_sums of that prediction."""
    rng = np.random.default_rng(4)
    model = rng.uniform(0.05, 8, (4, 6, 6))
    measured = rng.poisson(model).astype(float)
    measured[1, 2, :4] = 0.0
    mask = (rng.random((6, 6)) > 0.2).astype(float) if with_mask else np.ones((6, 6))
    torch_mask = torch.tensor(mask) if with_mask else None
    sums = saturated_sums(torch.tensor(measured, dtype=torch.float32), torch_mask)
    with np.errstate(divide="ignore", invalid="ignore"):
        i_log_i = np.where(measured > 0, measured * np.log(measured), 0.0)
    assert sums.dtype == torch.float64 and sums.shape == (2,)
    assert float(sums[0]) == pytest.approx(((measured - i_log_i) * mask).sum(), rel=1e-12)
    assert float(sums[1]) == ((measured >= 1) * mask).sum()
    loss = ((model - measured * np.log(model)) * mask).sum()
    deviance = deviance_sums(torch.tensor(model), torch.tensor(measured), torch_mask)
    assert loss - float(sums[0]) == pytest.approx(float(deviance[0]), rel=1e-10)


def test_deviance_is_zero_for_the_measured_counts():
    """The saturated model (the counts themselves) has deviance 0, zeros included."""
    measured = torch.tensor([[[0.0, 1.0], [4.0, 9.0]]])
    assert float(deviance_sums(measured, measured)[0]) == pytest.approx(0.0, abs=1e-12)
