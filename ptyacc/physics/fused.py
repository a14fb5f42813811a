"""The whole data term of one step, value and gradient together, in cache-sized chunks.

On a CPU an elementwise pass over a batch of waves costs as much as an FFT once the batch
outgrows the L2 cache, and autograd adds conjugate copies, broadcast reductions and saved
activations for the whole batch. ``ptycho_loss`` instead walks the batch in chunks of a few
patterns, runs forward and backward for each chunk while its waves are still in cache, and
keeps only the gradients: its autograd backward merely scales them. The same value and
gradients as the composition of ``fourier_shift``-style probe shifts, ``extract_patches``,
``exit_waves`` and ``far_field_loss`` (tests compare the two).
"""

from collections.abc import Callable

import torch

from ptyacc.physics.farfield import Detector, intensity_loss_terms, summed_intensity

CHUNK_BYTES = 8 * 2**20  # bounds the memory of one chunk; smaller chunks cost more in Python overhead than they save


def ptycho_loss(probe: torch.Tensor, obj: torch.Tensor, top_left: torch.Tensor, ramps: torch.Tensor | None,
                propagator: torch.Tensor | None, measured: torch.Tensor, kind: str = "amplitude",
                chunk: int | None = None, detector: Detector | None = None, weights: torch.Tensor | None = None,
                background: torch.Tensor | None = None, terms: Callable = intensity_loss_terms) -> torch.Tensor:
    """Summed loss of a batch of B positions.

    probe:      (P, K, K) complex probe modes, centred.
    obj:        (O, S, Ny, Nx) complex transmission.
    top_left:   (B, 2) long, corner of each position's K x K window in the object.
    ramps:      (B, K, K) complex Fourier multipliers of each position's sub-pixel probe shift
                (``shift_ramp``), or None for no shift. Differentiable (position refinement).
    propagator: (K, K) complex Fresnel kernel between slices (S > 1), else None.
    measured:   (B, K, K) intensities, unshifted layout.
    chunk:      patterns per chunk; default: a chunk's waves fill CHUNK_BYTES.
    detector:   near-field propagation and bad-pixel mask (``Detector``); default far field, all pixels.
    weights:    (B,) real intensity factor of each pattern (differentiable), or None.
    background: (K, K) real intensity added to every pattern, unshifted (differentiable), or None.
    terms:      ``intensity_loss_terms`` or a compiled equivalent (``CompiledTerms``).
    """
    if chunk is None:
        per_pattern = probe.shape[0] * obj.shape[0] * probe.shape[-1] ** 2 * probe.element_size()
        chunk = max(1, CHUNK_BYTES // per_pattern)
    return _PtychoLoss.apply(probe, obj, ramps, weights, background, top_left, propagator, measured, kind, chunk,
                             detector or Detector(), terms)


class _PtychoLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, probe, obj, ramps, weights, background, top_left, propagator, measured, kind, chunk, detector,
                terms):
        k = probe.shape[-1]
        n_modes, n_slices, ny, nx = obj.shape
        windows = obj.unfold(-2, k, 1).unfold(-2, k, 1)  # (O, S, Ny-K+1, Nx-K+1, K, K), a view
        grad_obj = torch.zeros_like(obj).reshape(n_modes, n_slices, ny * nx)
        offsets = torch.arange(k, device=obj.device)
        window_index = offsets[:, None] * nx + offsets[None, :]  # (K, K) flat offsets inside a window
        shifted = ramps is not None
        if shifted:
            spectrum = torch.fft.fft2(probe)  # (P, K, K)
            grad_spectrum_sum = torch.zeros_like(spectrum)
            grad_ramps = torch.empty_like(ramps) if ctx.needs_input_grad[2] else None
        else:
            grad_probe = torch.zeros_like(probe)
        total = torch.zeros((), dtype=measured.dtype, device=measured.device)
        grad_weights = torch.empty_like(weights) if weights is not None else None
        grad_background = torch.zeros_like(background) if background is not None else None
        for start in range(0, top_left.shape[0], chunk):
            part = slice(start, start + chunk)
            corners = top_left[part]
            patches = windows[:, :, corners[:, 0], corners[:, 1]].movedim(2, 0)  # (C, O, S, K, K)
            if shifted:
                probes = torch.fft.ifft2(spectrum * ramps[part, None])  # (C, P, K, K)
            else:
                probes = probe[None]
            loss, grad_probes, grad_patches, grad_w, grad_b, grad_back = _multislice_value_and_grad(
                probes, patches, propagator, measured[part], kind, detector,
                weights[part] if weights is not None else None, background, terms,
                ramps[part] if shifted else None, shifted and grad_ramps is not None)
            total += loss
            if grad_weights is not None:
                grad_weights[part] = grad_w
            if grad_background is not None:
                grad_background += grad_b
            flat = ((corners[:, 0] * nx + corners[:, 1])[:, None, None] + window_index).reshape(-1)
            grad_obj.index_add_(-1, flat, grad_patches.movedim(0, 2).reshape(n_modes, n_slices, -1))
            if shifted:
                # probes = ifft2(spectrum * ramp): the adjoint of ifft2 is fft2 / K^2
                grad_x = torch.fft.fft2(grad_probes)  # K^2 * d/d(spectrum * ramp)
                grad_spectrum_sum += (grad_x * ramps[part, None].conj()).sum(0)
                if grad_ramps is not None:
                    grad_ramps[part] = (grad_x * spectrum.conj()).sum(1) / k**2
                    if grad_back is not None:
                        grad_ramps[part] += grad_back
            else:
                grad_probe += grad_probes[0]
        if shifted:
            grad_probe = torch.fft.ifft2(grad_spectrum_sum)  # spectrum = fft2(probe): adjoint K^2 ifft2
        ctx.grads = (grad_probe, grad_obj.reshape(obj.shape), grad_ramps if shifted else None, grad_weights,
                     grad_background)
        return total

    @staticmethod
    def backward(ctx, grad_loss):
        grads = ctx.grads
        del ctx.grads
        return (*(None if g is None else g * grad_loss for g in grads), *[None] * 7)


def _multislice_value_and_grad(probes, patches, propagator, measured, kind, detector, weights, background,
                               terms=intensity_loss_terms, ramps=None, ramp_grad=False):
    """Loss of one chunk and its gradients with respect to the probes (C or 1, P, K, K), the
    patches (C, O, S, K, K), the weights (C,), the background (K, K) and, in the near field when
    ``ramp_grad``, the probe-shift ``ramps`` (C, K, K) through the image's shift back at the
    detector (``Detector``; else None). Forward as in
    ``exit_waves``; backward written out slice by slice: for t = a b the gradient is g conj(b);
    for a propagation ifft2(fft2(.) H) it is ifft2(fft2(g) conj(H)); the detector map is
    orthonormal, so its adjoint is its inverse (``Detector.adjoint``)."""
    n_slices = patches.shape[2]
    incident = []
    wave = probes[:, :, None] * patches[:, None, :, 0]  # (C, P, O, K, K)
    for s in range(1, n_slices):
        wave = torch.fft.ifft2(torch.fft.fft2(wave) * propagator)
        incident.append(wave)
        wave = wave * patches[:, None, :, s]
    shifted_back = detector.propagator is not None and ramps is not None
    if shifted_back:
        # Detector.field written out, to keep the spectrum for the gradient with respect to the ramps
        transfer = detector.transfer(ramps, wave.dim())  # propagator * conj(ramps)
        spectrum = torch.fft.fft2(wave, norm="ortho") * transfer
        far = torch.fft.ifft2(spectrum, norm="ortho")
    else:
        far = detector.field(wave)
    loss, factor, grad_weights, grad_background = terms(summed_intensity(far), measured, kind, weights, background,
                                                        detector.mask)
    grad_far = far * factor[:, None, None]
    grad_ramps = None
    if shifted_back:
        grad_spectrum = torch.fft.fft2(grad_far, norm="ortho")
        grad = torch.fft.ifft2(grad_spectrum * transfer.conj(), norm="ortho")
        if ramp_grad:
            # spectrum = G conj(R) with |R| = 1: the gradient in R is conj(grad_spectrum conj(G)) = R conj(grad_spectrum) spectrum
            grad_ramps = ramps * (grad_spectrum.conj() * spectrum).sum((1, 2))
    else:
        grad = detector.adjoint(grad_far)  # (C, P, O, K, K)
    grad_slices = [None] * n_slices
    for s in range(n_slices - 1, 0, -1):
        grad_slices[s] = _sum_axis(grad * incident[s - 1].conj(), 1)
        grad = torch.fft.ifft2(torch.fft.fft2(grad * patches[:, None, :, s].conj()) * propagator.conj())
    grad_slices[0] = _sum_axis(grad * probes[:, :, None].conj(), 1)
    grad_patches = grad_slices[0][:, :, None] if n_slices == 1 else torch.stack(grad_slices, dim=2)
    grad_probes = _sum_axis(grad * patches[:, None, :, 0].conj(), 2)
    if probes.shape[0] == 1:
        grad_probes = grad_probes.sum(0, keepdim=True)
    return loss, grad_probes, grad_patches, grad_weights, grad_background, grad_ramps


def _sum_axis(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim``; a view when it has size 1 (a reduction over it would cost a full pass)."""
    return tensor.squeeze(dim) if tensor.shape[dim] == 1 else tensor.sum(dim)


class CompiledTerms:
    """``intensity_loss_terms`` through ``torch.compile``, which fuses its dozen elementwise
    passes over the batch into one loop. If compiling fails (no C++ compiler, an unsupported
    platform or device), ``report`` is told once and the eager function is used from then on;
    an error that the eager function raises too is not hidden."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.failure: str | None = None
        try:
            self.compiled = torch.compile(intensity_loss_terms, dynamic=False)
        except Exception as exc:  # noqa: BLE001 - any failure means: run eagerly
            self._fall_back(exc)

    def __call__(self, *args):
        if self.failure is None:
            try:
                return self.compiled(*args)
            except Exception as exc:  # noqa: BLE001
                self._fall_back(exc)
        return intensity_loss_terms(*args)

    def _fall_back(self, exc: Exception) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        self.failure = f"{type(exc).__name__}: {first}"
        self.report(f"runtime.compile: torch.compile failed ({self.failure}); running without it")
