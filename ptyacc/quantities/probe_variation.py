"""A probe that varies across the scan (``model.probe_variation``): orthogonal probe relaxation.

The first probe mode at position j is

    probe_j = w_j0 P_0 + sum_{k=1..V} w_jk E_k

with P_0 the model's first probe mode (close to the mean probe), E_k (K, K) complex the V eigen-probes of
the variation and w_j (V + 1,) real weights per position: w_j0 the main mode's amplitude (a beam
current that fluctuates), the others how much of each eigen-probe the position sees (a defocus
that drifts with the sample's height). Further incoherent modes, where there are several, are
shared by every position: the variation applies to the first mode only.

The data term takes a probe per position (``ptycho_loss`` with (B, P, K, K)), so the eigen-probes
and the weights are plain autograd parameters (from ``optim.start.probe_variation``): the weights
refined by Adam (``optim.lr.probe_variation``, ``optim.lr.probe_amplitude``). The eigen-probes, with
``model.probe_variation_eigen: aberrations`` (auto's with V > 1), are never stepped: after every iteration
each is set to the derivative of P_0 by one low-order aberration (``ProbeVariation.follow``: focus, the
two astigmatisms, the two comas, the spherical aberration), what a sample's height or a lens that drifts
does to a probe and the object cannot hold; eigen-probes refined freely took up a crystal's structure
while fitting the data better. With ``free`` they take the probe's least-squares step where the probe
takes it (``EigenDescent``), Adam's otherwise. With ``defocus`` (auto's with V = 1) position j's first mode is
w_j0 times P_0 propagated by its own change of focus, w_j1 ``focus_unit_A`` Å (``refocused``), exact at
any change where the focus eigen-probe holds it to first order only (a drift of +-60 Å turns the phase
at a 25 mrad aperture's edge by +-2.8 rad at 80 kV): its weights take Adam's step of
``optim.lr.probe_defocus``, and after every iteration (``ProbeVariation.refocus``, in place of the
canonical form below) P_0 takes the mean change of focus and the main weights' mean.
After every iteration the eigen-probes lose their part along P_0's shifts (``ProbeVariation.unshift``: a
probe that moves with position is a position error, and on a crystal a strain), then
(``ProbeVariation.normalize``, the same on every process) the decomposition is put back into its
canonical form, every probe_j unchanged:
P_0 and the eigen-probes are made orthogonal in the real inner product Re<a, b> (the one in which
real weights combine them), sorted by power (a real SVD of the small product W [P_0; E]), P_0
scaled so that the main weights have a mean of 1 (P_0 is the first principal probe, close to the
mean probe) and each eigen-probe given P_0's norm, the weights changed to compensate. Then
(``model.probe_variation_smoothing_A``, by default over twice the distance between neighbours, with free
eigen-probes at least 3 Å)
the eigen-probes' weights are then averaged over neighbouring positions, less their mean (a
defocus drift is smooth across the field; beam-current noise is not, so w_j0 is never smoothed).

More freedom can fit worse: the eigen-probes and the object can drift together into a fit that no
single probe would give. ``VariationCheck`` (``model.probe_variation_check``, on by default) measures,
at the first step of every iteration after the variation's first, the data term of the step's batch
with each position's probe and with P_0 alone (the mean probe), on the same object; once the variation
fits it worse, every position takes P_0 from then on (weights 0, main weights 1, their steps 0; the
step is computed again with P_0) and the run says so on the terminal and in run.log. P_0 is then also
compared with P_0 from before the canonical form first mixed the eigen-probes into it, on the same batch,
and the better kept: a variation that went wrong at once put its errors into P_0 as well.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from ptyacc.optim.groups import ParameterGroup
from ptyacc.optim.row_adam import RowAdam, TakesStepContext
from ptyacc.physics.propagation import frequency_squared
from ptyacc.quantities.registry import BuildContext, Quantity, register
from ptyacc.quantities.slices import TiltSmoothing


class ProbeVariation(Quantity):
    """Eigen-probes and weights of a varying probe (module docstring), a ``Quantity``.

    Parameters
    - eigen: (V, K, K, 2) float32, real and imaginary parts of E_1..E_V divided by the model's
      ``probe_scale`` (as the probe's are)
    - amplitudes: (N,) float32, w_j0 of every position (Adam's step ``optim.lr.probe_amplitude``)
    - weights: (N, V) float32, w_j1 .. w_jV of every position
    """

    name = "probe_variation"

    def __init__(self, variation: int, positions: int, window: int, dx_A: float, seed: int = 0,
                 aberrations: bool = False, focus_unit_A: float | None = None, wavelength_A: float = 0.0) -> None:
        super().__init__()
        self.dx_A = dx_A  # the object's pixel, in which the positions are given
        self.seed = seed
        self.aberrations = aberrations  # the eigen-probes follow P_0's aberration derivatives, never stepped
        # ``model.probe_variation_eigen: defocus``: the one weight of a position is its change of focus in units of
        # this (Å), P_0 propagated by it (``focused``); None: the weights combine eigen-probes
        self.focus_unit_A, self.wavelength_A = focus_unit_A, wavelength_A
        # zero until the first ``normalize`` puts in ``first_directions`` of the probe it is given
        # with a change of focus per position the eigen-probe is only P_0's focus derivative, for results.h5: no
        # forward uses it, so it takes no gradient (DDP all-reduces only what does)
        self.eigen = nn.Parameter(torch.zeros(variation, window, window, 2), requires_grad=focus_unit_A is None)
        self.amplitudes = nn.Parameter(torch.ones(positions))  # w_j0
        self.weights = nn.Parameter(torch.zeros(positions, variation))  # w_jk, k >= 1
        self.mean_only = False  # every position takes P_0 (``mean_probe``, the check's comparison)
        # P_0 (K, K, 2) before the canonical form first mixed the eigen-probes into it: what ``drop`` restores
        self.unmixed: torch.Tensor | None = None
        self.dropped_at: int | None = None  # the iteration from which ``VariationCheck`` left P_0 alone

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        """(B, P, K, K) complex: the probe modes (P, K, K) of the positions ``indices`` (B,), the
        first mode varied by this decomposition, the others shared; (P, K, K) ``probe`` itself
        within ``mean_probe``."""
        if self.mean_only:
            return probe
        if self.focus_unit_A is not None:
            first = (self.amplitudes[indices, None, None].to(probe.dtype) * self.focused(probe[0], indices))[:, None]
        else:
            eigen = torch.view_as_complex(self.eigen) * probe_scale  # (V, K, K)
            first = (self.amplitudes[indices, None, None].to(probe.dtype) * probe[0]
                     + torch.einsum("bv,vyx->byx", self.weights[indices].to(probe.dtype), eigen))[:, None]
        if probe.shape[0] == 1:
            return first
        return torch.cat([first, probe[1:].expand(len(indices), -1, -1, -1)], dim=1)

    def focused(self, wave: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """(B, K, K) complex: ``wave`` (K, K) complex, a probe mode, with the focus of each position ``indices``
        (B,) changed by its weight times ``focus_unit_A`` (``refocused``)."""
        return refocused(wave, self.weights[indices, 0] * self.focus_unit_A, self.dx_A, self.wavelength_A)

    @torch.no_grad()
    def refocus(self, probe: torch.Tensor, smoothing: TiltSmoothing | None = None) -> None:
        """``normalize`` for a change of focus per position: P_0, the first mode of ``probe`` (P, K, K, 2), takes the
        main weights' mean (which becomes 1) and the mean change of focus (which becomes 0), every probe_j unchanged
        but for ``smoothing`` of the changes; the eigen-probe is P_0's focus derivative, for results.h5."""
        wave = torch.view_as_complex(probe[0].double().contiguous())
        mean, shift = self.amplitudes.double().mean(), self.weights.double().mean(0)  # (), (1,)
        wave = refocused(wave, shift * self.focus_unit_A, self.dx_A, self.wavelength_A)[0] * mean
        self.weights.sub_(shift.to(self.weights.dtype))
        if smoothing is not None:
            smoothing(self.weights)
        self.amplitudes.div_(mean.to(self.amplitudes.dtype))
        probe[0].copy_(torch.view_as_real(wave).to(probe.dtype))
        self.eigen.copy_((first_directions(probe[0], 1) * probe[0].norm()).to(self.eigen.dtype))

    @contextlib.contextmanager
    def mean_probe(self) -> Iterator[None]:
        """Within it every position's probe is the model's probe, P_0 unweighted."""
        self.mean_only = True
        try:
            yield
        finally:
            self.mean_only = False

    @torch.no_grad()
    def drop(self, iteration: int, groups: list[ParameterGroup], probe: torch.Tensor, restore: bool) -> None:
        """From ``iteration`` on every position takes P_0: the weights 0, the main weights 1 and the
        steps of ``groups`` (this quantity's) 0; where ``restore``, P_0, the first mode of ``probe``
        (P, K, K, 2), goes back to ``unmixed``."""
        if restore:
            probe[0].copy_(self.unmixed)
        self.weights.zero_()
        self.amplitudes.fill_(1.0)
        for group in groups:
            group.lr = 0.0
        self.dropped_at = iteration

    @contextlib.contextmanager
    def unmixed_probe(self, probe: torch.Tensor) -> Iterator[None]:
        """Within it P_0, the first mode of ``probe`` (P, K, K, 2), is ``unmixed``; after it as before."""
        current = probe[0].detach().clone()
        with torch.no_grad():
            probe[0].copy_(self.unmixed)
        try:
            yield
        finally:
            with torch.no_grad():
                probe[0].copy_(current)

    @torch.no_grad()
    def normalize(self, probe: torch.Tensor, smoothing: TiltSmoothing | None = None) -> None:
        """The canonical form of the module docstring, in place; ``probe`` is the model's probe
        parameter (P, K, K, 2), whose first mode is P_0 (changed with the eigen-probes)."""
        if not self.eigen.any():
            self.eigen.copy_(first_directions(probe[0], len(self.eigen), self.seed))
        basis = torch.cat([probe[:1], self.eigen]).reshape(len(self.eigen) + 1, -1).double()  # (V + 1, 2 K^2)
        # W B = W R^T Q^T with B^T = Q R, and W R^T = U S Vh (a real SVD of a small matrix): W B = (U S) (Vh Q^T)
        q, r = torch.linalg.qr(basis.T)
        senses = torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(q.dtype)  # Gram-Schmidt's: still basis^T = q r
        q, r = q * senses, r * senses[:, None]
        if not self.weights.any():  # before the variation starts: its start directions, orthogonal, of P_0's norm
            self.eigen.copy_((q[:, 1:].T * basis[0].norm()).reshape(self.eigen.shape).to(self.eigen.dtype))
            return
        if self.unmixed is None:
            self.unmixed = probe[0].clone()
        u, s, vh = torch.linalg.svd(self.all_weights().double() @ r.T, full_matrices=False)
        modes, weights = vh @ q.T, u * s  # orthonormal rows, by decreasing power
        # the SVD's sign of each pair is arbitrary: each mode keeps the sense of the one it replaces, so
        # that Adam's moments of the eigen-probes and weights still point the same way
        signs = torch.where((modes * basis).sum(1, keepdim=True) < 0, -1.0, 1.0).to(modes.dtype)
        modes, weights = modes * signs, weights * signs.T
        mean = weights[:, 0].mean()  # the first mode scaled (and its sign chosen) so that its weights' mean is 1
        modes[0] *= mean
        weights[:, 0] /= mean
        norm0 = modes[0].norm()
        modes[1:] *= norm0
        weights[:, 1:] /= norm0
        if smoothing is not None:
            smoothing(weights[:, 1:])  # Gaussian mean over neighbours, less the mean over all
        probe[0].copy_(modes[0].reshape(probe[0].shape).to(probe.dtype))
        self.eigen.copy_(modes[1:].reshape(self.eigen.shape).to(self.eigen.dtype))
        self.amplitudes.copy_(weights[:, 0].to(self.amplitudes.dtype))
        self.weights.copy_(weights[:, 1:].to(self.weights.dtype))

    @torch.no_grad()
    def follow(self, probe: torch.Tensor) -> None:
        """Each eigen-probe the derivative of P_0, the first mode of ``probe`` (P, K, K, 2), by its aberration
        (``first_directions``), of P_0's norm, and each position's weights those of the least-squares fit of its
        variation by them: every position keeps what of its probe's change these directions hold, and loses
        the rest (the canonical form mixes the eigen-probes; this takes them back to one aberration each)."""
        directions = (first_directions(probe[0], len(self.eigen)).double() * probe[0].double().norm()).flatten(1)
        before = self.eigen.double().flatten(1)  # (V, 2 K^2)
        # before_k ~ sum_m c_km directions_m, so sum_k w_jk before_k ~ sum_m (w c)_jm directions_m
        fit = torch.linalg.solve(directions @ directions.T, directions @ before.T).T  # (V, V): c
        self.weights.copy_((self.weights.double() @ fit).to(self.weights.dtype))
        self.eigen.copy_(directions.reshape(self.eigen.shape).to(self.eigen.dtype))

    @torch.no_grad()
    def unshift(self, probe: torch.Tensor) -> None:
        """Each eigen-probe less its part along the directions that shift P_0, the first mode of ``probe``
        (P, K, K, 2), in the real inner product (``shift_directions``; a shift keeps P_0's norm, so they are
        orthogonal to it and so are the eigen-probes after). A position's probe that moves with its weights
        is a position error, which ``model``'s positions own; on a crystal a smooth field of such shifts is
        a strain the object follows as well, so the data cannot tell the two apart."""
        shifts, _ = torch.linalg.qr(shift_directions(probe[0]).reshape(2, -1).T)  # (2 K^2, 2) orthonormal
        eigen = self.eigen.reshape(len(self.eigen), -1).double()  # (V, 2 K^2)
        self.eigen.copy_((eigen - (eigen @ shifts) @ shifts.T).reshape(self.eigen.shape).to(self.eigen.dtype))

    def all_weights(self) -> torch.Tensor:
        """(N, V + 1): w_j0 .. w_jV of every position."""
        return torch.cat([self.amplitudes[:, None], self.weights], dim=1)

    def normalizer(self, model, config) -> Callable[[], None]:
        """What follows every iteration of ``model`` (the ``PtychoModel`` holding this): ``normalize``
        with its probe, the weights smoothed over its positions by a Gaussian of
        ``config.model.probe_variation_smoothing_A`` Å (None: not smoothed; auto, twice the median distance
        between neighbouring positions, is resolved before the model is built: ``reconstruction/autos.py``)."""
        sigma_A = config.model.probe_variation_smoothing_A
        if sigma_A == "auto":
            raise ValueError("model.probe_variation_smoothing_A: auto reaches the quantity unresolved; build the run's "
                             "config with reconstruction.autos.resolve_autos")
        smoothing = None if sigma_A is None else TiltSmoothing(model.positions_px, sigma_A / self.dx_A)

        def after_iteration() -> None:
            if self.focus_unit_A is not None:
                self.refocus(model.probe, smoothing)
                return
            if self.aberrations and self.weights.any():
                self.follow(model.probe)
            self.unshift(model.probe)
            self.normalize(model.probe, smoothing)
        return after_iteration

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        """The main weights and the eigen-probes' weights, a row per position stepped at its visits
        only (``RowAdam``), and the eigen-probes, which put the form back after every iteration: where
        the probe takes the least-squares step (``optim.probe_optimizer``: preconditioned, the default)
        they take it too, at the probe's fraction of it (``optim.preconditioned_probe_step``,
        ``EigenDescent``); with Adam's probe, Adam's step of ``optim.lr.probe_variation``."""
        opt, start = config.optim, config.optim.start
        begin = start.probe if start.probe_variation == "probe" else start.probe_variation
        eigen = ParameterGroup("probe_variation", [self.eigen], opt.lr.probe_variation, begin,
                               after_iteration=self.normalizer(model, config))
        if priors.probe_optimizer == "preconditioned":
            eigen.lr = opt.preconditioned_probe_step if opt.lr.probe_variation > 0 else 0.0  # 0 freezes them, as with Adam
            eigen.optimizer = EigenDescent([self.eigen], eigen.lr, self.weights, float(model.probe_scale),
                                           config.model.object_amplitude_bounds[1] ** 2, priors.share)
        if self.aberrations:  # ``follow`` (``refocus``) sets them after every iteration
            eigen.lr = 0.0
        weights_lr = opt.lr.probe_variation if self.focus_unit_A is None else opt.lr.probe_defocus
        return [ParameterGroup("probe_amplitude", [self.amplitudes], opt.lr.probe_amplitude, begin,
                               optimizer=RowAdam([self.amplitudes], opt.lr.probe_amplitude)),
                ParameterGroup("probe_weights", [self.weights], weights_lr, begin,
                               optimizer=RowAdam([self.weights], weights_lr)),
                eigen]

    def attributes(self, model) -> dict[str, float]:
        """results.h5's attributes ``probe_variation_dropped_at``: the iteration from which every position
        took P_0 (``VariationCheck``), where it did; ``probe_variation_focus_unit_A``: with
        ``model.probe_variation_eigen: defocus``, the change of focus (Å) of a weight of 1."""
        said = {} if self.dropped_at is None else {"probe_variation_dropped_at": self.dropped_at}
        return said if self.focus_unit_A is None else {**said, "probe_variation_focus_unit_A": self.focus_unit_A}

    def saved(self, model) -> dict[str, np.ndarray]:
        """results.h5's group ``probe_variation``: ``modes`` (V + 1, K, K) complex64 [P_0, E_1..E_V] and
        ``weights`` (N, V + 1) float64."""
        with torch.no_grad():
            eigen = torch.view_as_complex(self.eigen) * model.probe_scale
            modes = torch.cat([model.complex_probe()[:1], eigen]).cpu().numpy()
            return {"modes": modes, "weights": self.all_weights().double().cpu().numpy()}


@register
def varying_probe(config, model, context: BuildContext) -> ProbeVariation | None:
    """``model.probe_variation`` eigen-probes, when asked for."""
    if config.model.probe_variation == 0:
        return None
    kind = config.model.probe_variation_eigen
    if kind == "auto":
        raise ValueError("model.probe_variation_eigen: auto reaches the quantity unresolved; build the run's config "
                         "with reconstruction.autos.resolve_autos")
    focus_unit_A = None
    if kind == "defocus":  # a weight of 1 changes P_0 as much as one of an eigen-probe of ``aberrations``
        focus_unit_A = focus_unit(model.complex_probe()[0].detach(), context.geometry.dx_A, context.data.wavelength_A)
    return ProbeVariation(config.model.probe_variation, len(model.positions_px), model.window, context.geometry.dx_A,
                          config.runtime.seed, kind in ("aberrations", "defocus"), focus_unit_A, context.data.wavelength_A)


def focus_unit(wave: torch.Tensor, dx_A: float, wavelength_A: float) -> float:
    """The change of focus (Å) that changes the probe mode ``wave`` (K, K) complex, to first order, by its own norm:
    1 / (pi lambda rms(q^2)), the rms over its spectrum's power."""
    q = torch.fft.fftfreq(wave.shape[-1], d=dx_A, dtype=torch.float64)
    q2 = q[:, None] ** 2 + q[None, :] ** 2
    power = torch.fft.fft2(wave.cpu().to(torch.complex128)).abs() ** 2
    return float(1.0 / (math.pi * wavelength_A * torch.sqrt((power * q2 ** 2).sum() / power.sum())))


def refocused(wave: torch.Tensor, change_A: torch.Tensor, dx_A: float, wavelength_A: float) -> torch.Tensor:
    """(B, K, K) complex: the probe mode ``wave`` (K, K) complex (pixel ``dx_A``) with its defocus changed by each
    of ``change_A`` (B,) Å, a Fresnel propagation, exact at any change: a probe of defocus f + d is the one of f
    with its spectrum times exp(+i pi lambda d q^2) (``physics.probe.stem_probe``)."""
    q2 = frequency_squared(wave.shape[-1], dx_A, wave.device, wave.real.dtype)
    transfer = torch.polar(torch.ones_like(q2), math.pi * wavelength_A * change_A.to(q2.dtype)[:, None, None] * q2)
    return torch.fft.ifft2(torch.fft.fft2(wave)[None] * transfer)


def first_directions(probe: torch.Tensor, count: int, seed: int = 0) -> torch.Tensor:
    """(count, K, K, 2): the eigen-probes' start from the first probe mode ``probe`` (K, K, 2): how it
    changes with each low-order aberration (``ABERRATIONS``: focus first, the derivative of a Fresnel
    propagation, a sample's height that drifts; then a lens that changes), then seeded noise (not a shift:
    ``ProbeVariation.unshift``), each of unit norm. Weights start at zero, so the gradient of each position's
    weights is at once the projection of its probe's gradient on these directions."""
    wave = torch.view_as_complex(probe.double().contiguous())
    k = wave.shape[-1]
    q = torch.fft.fftfreq(k, dtype=torch.float64, device=wave.device)
    spectrum = torch.fft.fft2(wave)
    qy, qx = q[:, None], q[None, :]
    directions = [torch.fft.ifft2(spectrum * 1j * phase(qy, qx)) for phase in ABERRATIONS[:count]]
    generator = torch.Generator().manual_seed(seed + 17)
    while len(directions) < count:
        noise = torch.randn(k, k, 2, generator=generator, dtype=torch.float64)
        directions.append(torch.view_as_complex(noise).to(wave.device))
    stacked = torch.view_as_real(torch.stack(directions))
    return (stacked / stacked.flatten(1).norm(dim=1).clamp_min(1e-30)[:, None, None, None]).to(probe.dtype)


# the phase (of the FFT's frequencies qy, qx, (K, 1) and (1, K)) by which each low-order aberration changes a probe's
# spectrum, up to its coefficient: focus, the two astigmatisms, the two comas, the spherical aberration; their
# derivatives are the eigen-probes of ``model.probe_variation_eigen: aberrations`` (config/schema.py allows 6)
ABERRATIONS = (lambda qy, qx: qy ** 2 + qx ** 2, lambda qy, qx: qy ** 2 - qx ** 2, lambda qy, qx: 2 * qy * qx,
               lambda qy, qx: (qy ** 2 + qx ** 2) * qy, lambda qy, qx: (qy ** 2 + qx ** 2) * qx,
               lambda qy, qx: (qy ** 2 + qx ** 2) ** 2)


def shift_directions(probe: torch.Tensor) -> torch.Tensor:
    """(2, K, K, 2) float64: how the probe mode ``probe`` (K, K, 2) changes when it shifts along y and along x,
    ifft2(i q fft2(P)) with q the FFT's frequencies along each axis."""
    wave = torch.view_as_complex(probe.double().contiguous())
    k = wave.shape[-1]
    q = torch.fft.fftfreq(k, dtype=torch.float64, device=wave.device)
    spectrum = torch.fft.fft2(wave)
    return torch.view_as_real(torch.stack([torch.fft.ifft2(spectrum * 1j * q[:, None]),
                                           torch.fft.ifft2(spectrum * 1j * q[None, :])]))


# the eigen-probes' step divides by the mean square of their weights over the batch, at least this: weights are
# relative to P_0's norm, which each eigen-probe has, so weights below 0.1 rms take a damped step (1e-3 and 1e-2
# gave the same fit on a strongly drifting case; without a floor the first iterations' small weights made steps
# that threw the fit away)
WEIGHT_FLOOR = 1e-2


class EigenDescent(TakesStepContext, torch.optim.Optimizer):
    """The eigen-probes (V, K, K, 2) by the least-squares step of ``ProbeDescent``: the probe's step
    for an object of intensity ``intensity`` (the loss's ``share`` of the gradient), divided by
    the mean over the step's global batch of each eigen-probe's weights squared (at least
    ``WEIGHT_FLOOR``). That is the least-squares fit, by w_jk E_k, of the steps every position's
    own probe would take, times ``lr``; no state, the same numbers on every process (the weights
    ``weights`` (N, V) are replicated).

    Adam's step, of one size at every pixel, moved the eigen-probes where the probe is dark as
    much as where it is bright, once per step: on a scan of many steps per iteration the
    eigen-probes filled with noise and the fit diverged."""

    def __init__(self, params, lr: float, weights: torch.Tensor, probe_scale: float, intensity: float,
                 share: float) -> None:
        super().__init__(params, {"lr": lr})
        self.weights, self.factor = weights, share / (probe_scale ** 2 * intensity)

    @torch.no_grad()
    def step(self, closure=None) -> None:
        rows = self.context.batch
        weights = self.weights.detach() if rows is None else self.weights.detach()[rows.to(self.weights.device)]
        power = weights.double().square().mean(0).clamp_min(WEIGHT_FLOOR)  # (V,)
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    param.sub_(param.grad * (group["lr"] * self.factor / power).to(param.dtype)[:, None, None, None])


# the varying probe is dropped where it fits a batch worse than the mean probe by more than this fraction of the
# batch's counts: below it the two fit alike (measured on a steady probe: the variation within 1.3e-4 of the counts
# either way in its first iterations, then 2e-4 better; 1.3 times the counts worse where its weights' step was
# 33 times the default, benchmarks/records/2026-12-02-opr-safeguard.md)
TOLERANCE = 1e-3


class VariationCheck:
    """The safeguard of the module docstring for ``variation`` and its ``groups``, which start at
    iteration ``begin``. Called at a step (the first of each iteration) with the data term of its batch
    as the step computed it, it computes the same with P_0 alone, adds both and the batch's counts over
    the processes and, where the variation fits worse than P_0 by more than ``TOLERANCE`` of the counts,
    drops it (``ProbeVariation.drop``) and returns the line that says so. Every process takes the same
    decision: it reads the same sums."""

    def __init__(self, variation: ProbeVariation, groups: list[ParameterGroup], begin: int | None) -> None:
        self.variation, self.groups, self.begin = variation, groups, begin

    def due(self, iteration: int) -> bool:
        """Whether ``iteration`` is judged: after the variation's first (its weights start at 0 and a
        row is stepped at its visits only, so that the first iteration's batches see P_0 alone) and while
        it is on."""
        return self.variation.dropped_at is None and self.begin is not None and iteration > self.begin

    @torch.no_grad()
    def __call__(self, model, accelerator, iteration: int, indices: torch.Tensor, measured: torch.Tensor, loss: str,
                 varied: torch.Tensor) -> str | None:
        """``varied`` (0-d): the data term of the batch ``indices`` (B,) of ``measured`` (B, K, K) as
        ``model`` (unwrapped) computed it at a step of ``iteration``, before its update. The line saying
        the variation was dropped, or None (every process calls it at the same step)."""
        if not self.due(iteration):
            return None
        with self.variation.mean_probe():
            plain = model(indices, measured, loss)
        sums = torch.stack([varied.detach().double(), plain.detach().double(), measured.double().sum()])
        if accelerator.num_processes > 1:
            sums = accelerator.reduce(sums, reduction="sum")
        varied_sum, plain_sum, counts = sums.tolist()
        if varied_sum <= plain_sum + TOLERANCE * counts:
            return None
        restore = self.unmixed_fits_better(model, accelerator, indices, measured, loss, plain_sum)
        self.variation.drop(iteration, self.groups, model.probe, restore)
        back = ", as it was before the variation first changed it (that fits the batch better)" if restore else ""
        return (f"model.probe_variation: every position takes the mean probe from iteration {iteration}{back}: the "
                f"varying probe fitted a batch worse than the mean probe (data term {varied_sum:.6g} against "
                f"{plain_sum:.6g}, {counts:.6g} counts); model.probe_variation_check: false keeps it")

    def unmixed_fits_better(self, model, accelerator, indices: torch.Tensor, measured: torch.Tensor, loss: str,
                            plain_sum: float) -> bool:
        """Whether P_0 from before the canonical form first mixed the eigen-probes into it (``unmixed``) fits the
        batch better than P_0 now (``plain_sum``, summed over the processes). A hasty first step mixes its
        errors into P_0, which then stay; after several iterations the object has moved on with P_0 and the
        earlier P_0 can lead it elsewhere (measured: benchmarks/records/2026-12-02-opr.md): the batch decides."""
        if self.variation.unmixed is None:  # a run resumed after the variation started keeps no such copy
            return False
        with self.variation.mean_probe(), self.variation.unmixed_probe(model.probe):
            earlier = model(indices, measured, loss).detach().double()
        if accelerator.num_processes > 1:
            earlier = accelerator.reduce(earlier, reduction="sum")
        return float(earlier) < plain_sum


def variation_check(config, model, groups: list[ParameterGroup]) -> VariationCheck | None:
    """The run's ``VariationCheck``: where ``model`` has a varying probe and ``model.probe_variation_check``
    is on; ``groups`` the run's, of which it takes the variation's."""
    if "probe_variation" not in model.quantities or not config.model.probe_variation_check:
        return None
    mine = [group for group in groups if group.name in ("probe_amplitude", "probe_weights", "probe_variation")]
    return VariationCheck(model.quantities["probe_variation"], mine, mine[0].start)
