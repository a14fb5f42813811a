"""The whole data term of one step, value and gradient together, in cache-sized chunks.

On a CPU an elementwise pass over a batch of waves costs as much as an FFT once the batch
outgrows the L2 cache, and autograd adds conjugate copies, broadcast reductions and saved
activations for the whole batch. ``ptycho_loss`` instead walks the batch in chunks of a few
patterns, runs the stages of the forward chain (``ProbeShift``, ``Patches``, ``Multislice``,
``Detect``, then the data fidelity ``intensity_loss_terms``) forward and backward for each chunk
while its waves are still in cache, and keeps only the gradients: its autograd backward merely
scales them. The same value and gradients as autograd through ``detected_intensities``'s chain (prediction.py)
and ``far_field_loss``, the plain reference kept here beside it (tests compare the two).
"""

import time
from collections.abc import Callable

import torch

from ptyacc.physics.chain import (
    Detect,
    Detector,
    Multislice,
    Patches,
    ProbeShift,
    check_kind,
    detector_response,
    field_loss_terms,
    intensity_loss_terms,
    loss_from_intensities,
    summed_intensity,
)

CHUNK_BYTES = 8 * 2**20  # bounds the memory of one chunk; smaller chunks cost more in Python overhead than they save
# On a GPU the cache argument does not hold and every chunk is a launch of each of its kernels: a chunk there is
# a 64th of the device's memory, at most 1 GiB (the whole batch in most runs). Measured on an H200 (12 modes of
# 128 px, 6 slices, batch 256): the CPU's 8 MiB chunks of 5 patterns launched 5549 kernels per step of about 5 us each
DEVICE_CHUNK_BYTES = (64 * 2**20, 2**30)
DEVICE_CHUNK_SHARE = 64


def chunk_bytes(device: torch.device) -> int:
    """The bytes of one chunk's waves on ``device``: CHUNK_BYTES on a CPU, else a 64th of the device's memory
    within DEVICE_CHUNK_BYTES."""
    device = torch.device(device)
    if device.type == "cpu":
        return CHUNK_BYTES
    low, high = DEVICE_CHUNK_BYTES
    return int(min(high, max(low, device_memory_bytes(device) // DEVICE_CHUNK_SHARE)))


def device_memory_bytes(device: torch.device) -> int:
    """The memory of an accelerator: CUDA's total, MPS's recommended most; 0 where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    recommended = getattr(getattr(torch, "mps", None), "recommended_max_memory", None)  # torch >= 2.3
    if device.type == "mps" and recommended is not None:
        return int(recommended())
    return 0


def ptycho_loss(probe: torch.Tensor, obj: torch.Tensor, top_left: torch.Tensor, ramps: torch.Tensor | None,
                propagator: torch.Tensor | None, measured: torch.Tensor, kind: str = "amplitude",
                chunk: int | None = None, detector: Detector | None = None, weights: torch.Tensor | None = None,
                background: torch.Tensor | None = None, terms: Callable = intensity_loss_terms,
                exit_ramps: torch.Tensor | None = None, field_terms: Callable | None = None,
                floor_share: torch.Tensor | None = None, floor: float | None = None) -> torch.Tensor:
    """Summed loss of a batch of B positions.

    probe:      (P, K, K) complex probe modes, centred; or (B, P, K, K), a probe per position
                (``probe_variation``, several scans), whose gradient is then per position too.
    obj:        (O, S, Ny, Nx) complex transmission.
    top_left:   (B, 2) long, corner of each position's K x K window in the object.
    ramps:      (B, K, K) complex Fourier multipliers of each position's sub-pixel probe shift
                (``shift_ramp``), or None for no shift. Differentiable (position refinement).
    propagator: (K, K) complex Fresnel kernel between slices (S > 1), or (B, K, K), one per position
                (``tilted_propagator``), else None. Differentiable (tilt, slice thickness).
    measured:   (B, K, K) intensities, unshifted layout.
    chunk:      patterns per chunk; default: a chunk's waves fill ``chunk_bytes`` (8 MiB on a CPU, whose cache
                they then stay in; a 64th of the memory, up to 1 GiB, on a GPU, whose kernels are then few and large).
    detector:   near-field propagation, bad-pixel mask and point spread (``Detector``; its blur variance is
                differentiable); default far field, all pixels, no blur.
    weights:    (B,) real intensity factor of each pattern (differentiable), or None.
    background: (K, K) real intensity added to every pattern, unshifted (differentiable), or None.
    terms:      ``intensity_loss_terms`` or a compiled equivalent (``CompiledTerms``).
    exit_ramps: (B, K, K) complex factors of each position's exit wave, the descan's phase ramps
                (``Multislice``), or None. Not differentiated (the descan is measured, not refined).
    field_terms: ``CompiledTerms.field``, the detector field's intensity, loss terms and gradient field in one
                compiled pass, or None: ``eager_field_terms`` with ``terms``. Not with a detector blur, which
                transforms between the intensity and the terms.
    floor_share: (B,) each pattern's share of the loss's floor (``intensity_loss_terms``; several scans), or None.
    floor:      what the loss adds to the model intensity (a run's amplitude floor), or None: the kind's own.
    """
    if chunk is None:
        per_pattern = probe.shape[-3] * obj.shape[0] * probe.shape[-1] ** 2 * probe.element_size()
        chunk = max(1, chunk_bytes(probe.device) // per_pattern)
    detector = detector or Detector()
    return _PtychoLoss.apply(probe, obj, ramps, weights, background, top_left, propagator, measured, kind, chunk,
                             detector, terms, detector.blur_variance_px2, exit_ramps, field_terms, floor_share, floor)


class _PtychoLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, probe, obj, ramps, weights, background, top_left, propagator, measured, kind, chunk, detector,
                terms, blur_variance, exit_ramps, field_terms, floor_share, floor):
        # the gradients that vary per position are gathered in lists, joined by ``backward`` (``_joined``: no copy
        # for one chunk)
        k = probe.shape[-1]
        per_position = propagator is not None and propagator.dim() == 3
        per_probe = probe.dim() == 4  # a probe per position (B, P, K, K)
        grad_propagator = None if not ctx.needs_input_grad[6] else [] if per_position else torch.zeros_like(propagator)
        grad_obj = torch.zeros(obj.shape, dtype=obj.dtype, device=obj.device)  # contiguous, for add_adjoint
        shifted = ramps is not None
        conjugated = shifted or per_probe or obj.shape[1] > 1  # the backward on conj(gradients) where it saves copies
        # a probe shared by the batch (P, K, K) divided by K: the detector's transforms then scale nothing (``Detect``)
        scale = 1.0 if per_probe else 1.0 / k
        probe = probe if per_probe else probe * scale
        spectrum = torch.fft.fft2(probe, norm="forward") if shifted else None  # shifted chunk by chunk (ProbeShift)
        grad_ramps = [] if shifted and ctx.needs_input_grad[2] else None
        grad_probe = []  # per chunk: the probe's gradient, or with a shift the sum over the chunk of its spectrum's
        total = None  # the sums over the chunks start from the first chunk's value, not from zeros (0 + x = x)
        grad_weights = [] if weights is not None else None
        grad_background = torch.zeros_like(background) if background is not None else None
        grad_blur = torch.zeros_like(blur_variance) if ctx.needs_input_grad[12] else None
        for start in range(0, top_left.shape[0], chunk):
            # one chunk while its waves are in cache: each stage's forward, the data fidelity's
            # gradient in the detector field, then each stage's vjp in reverse order
            part = slice(start, start + chunk)
            shift = ProbeShift(ramps[part] if shifted else None)
            patches = Patches(top_left[part], k)
            detect = Detect(detector, shift.ramps, prescaled=not per_probe)
            multislice = Multislice(propagator[part] if per_position else propagator,
                                    exit_ramps[part] if exit_ramps is not None else None)
            spectra = [] if grad_propagator is not None else None
            probes = (shift.from_spectrum(spectrum[part] if per_probe else spectrum) if shifted
                      else shift.forward(probe[part] if per_probe else probe))
            windows = patches.forward(obj)  # (C, O, S, K, K)
            waves, incident = multislice.forward_with_incident(probes, windows, spectra)
            far, far_spectrum = detect.forward_with_spectrum(waves)
            weights_part = weights[part] if weights is not None else None
            floor_part = floor_share[part] if floor_share is not None else None
            if detect.blur is None:  # intensity, loss and gradient field in one piece (compiled: ``field_terms``)
                loss, grad_field, grad_w, grad_b = (field_terms or eager_field_terms)(
                    far, measured[part], kind, weights_part, background, detect.mask, conjugated, terms, floor_part, floor)
            else:
                coherent, blur_spectrum = summed_intensity(far), None
                if detect.blur is not None:  # the detector's point spread
                    coherent, blur_spectrum = detect.blur.forward_with_spectrum(coherent)
                loss, factor, grad_w, grad_b = terms(coherent, measured[part], kind, weights_part, background,
                                                     detect.mask, True, floor_part, floor)
                if detect.blur is not None:  # factor = 2 dL/d(blurred) -> 2 dL/d(summed intensity)
                    factor, grad_v = detect.blur.vjp(factor, coherent, blur_spectrum if grad_blur is not None else None)
                    if grad_v is not None:
                        grad_blur += 0.5 * grad_v
                grad_field = (far.conj_physical_() if conjugated else far).mul_(factor[:, None, None])
            # near field with ramps: the gradient of the image's shift back at the detector too
            grad_waves, grad_back = detect.vjp(grad_field, far_spectrum if grad_ramps is not None else None, conjugated)
            grad_probes, grad_patches, grad_h = multislice.vjp_all(grad_waves, probes, windows, incident, spectra, conjugated,
                                                                   consume=True)
            total = loss if total is None else total + loss
            if grad_h is not None and per_position:
                grad_propagator.append(grad_h)
            elif grad_h is not None:
                grad_propagator += grad_h
            if grad_weights is not None:
                grad_weights.append(grad_w)
            if grad_background is not None:
                grad_background += grad_b
            patches.add_adjoint(grad_obj, grad_patches)
            if shifted:
                own = spectrum[part] if per_probe else spectrum
                grad_spectrum, grad_r = shift.spectrum_vjp(grad_probes, own if grad_ramps is not None else None, per_probe,
                                                           conjugated)
                grad_probe.append(grad_spectrum)
                if grad_ramps is not None:
                    grad_ramps.append(grad_r if grad_back is None else grad_r.add_(grad_back))
            else:
                grad_probe.append(shift.adjoint(grad_probes, per_position=per_probe))
        # per position: the chunks' pieces joined; shared: summed in the chunks' order
        grad_probe = grad_probe[0] if len(grad_probe) == 1 else torch.cat(grad_probe) if per_probe \
            else sum(grad_probe[1:], grad_probe[0])
        if shifted:  # ProbeShift.adjoint, summed over the chunks first; ifft2(conj(x)) = conj(fft2(x, norm="forward"))
            grad_probe = torch.fft.fft2(grad_probe, norm="forward") if conjugated else torch.fft.ifft2(grad_probe)
        if conjugated:  # the object's and the probe's gradients made plain (the object's size; K x K per mode, or per position)
            grad_probe, grad_obj = grad_probe.conj_physical_(), grad_obj.conj_physical_()
        # in the order of forward's inputs; None for those without a gradient
        ctx.grads = (grad_probe if per_probe else grad_probe * scale, grad_obj, grad_ramps, grad_weights,
                     grad_background, None, grad_propagator, None, None, None, None, None, grad_blur, None, None, None, None)
        return total

    @staticmethod
    def backward(ctx, grad_loss):
        grads = ctx.grads
        del ctx.grads
        # scaled in place: forward made each of them, and nothing else holds them
        return tuple(None if g is None else _joined(g).mul_(grad_loss) for g in grads)


def _joined(pieces: list[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """The chunks' pieces (each (c, ...)) of a gradient per position as one (B, ...) tensor; a tensor as it is."""
    if isinstance(pieces, torch.Tensor):
        return pieces
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def far_field_loss(waves: torch.Tensor, measured: torch.Tensor, kind: str = "amplitude",
                   detector: Detector | None = None, weights: torch.Tensor | None = None,
                   background: torch.Tensor | None = None, ramps: torch.Tensor | None = None,
                   floor: float | None = None) -> torch.Tensor:
    """Loss (scalar) of exit waves (B, ..., K, K) complex against measured intensities (B, K, K),
    both unshifted, differentiated by autograd: the plain reference for ``ptycho_loss`` (``floor`` as its).
    Model intensity: weights (B,) * blur(sum over modes |detector field|^2) + background (K, K);
    ramps (B, K, K): the probes' sub-pixel shifts, undone at a near-field detector (``Detect``)."""
    check_kind(kind)
    detect = Detect(detector or Detector(), ramps)
    intensity = detector_response(detect.intensity(detect.forward(waves)), weights, background)
    per_pixel = loss_from_intensities(intensity, measured, kind, reduce=False, floor=floor)
    return (per_pixel if detect.mask is None else per_pixel * detect.mask).sum()


def eager_field_terms(far: torch.Tensor, measured: torch.Tensor, kind: str, weights: torch.Tensor | None,
                      background: torch.Tensor | None, mask: torch.Tensor | None, conjugated: bool,
                      terms: Callable = intensity_loss_terms, floor_share: torch.Tensor | None = None,
                      floor: float | None = None) -> tuple:
    """(loss, gradient field, grad_weights, grad_background) of the complex detector field ``far`` (B, ..., K, K)
    against ``measured`` (B, K, K): the intensity summed over the modes, ``terms`` (``intensity_loss_terms``'s
    arguments and results), and factor * far (conj(far) * factor when ``conjugated``), written into ``far``."""
    loss, factor, grad_w, grad_b = terms(summed_intensity(far), measured, kind, weights, background, mask, True,
                                         floor_share, floor)
    return loss, (far.conj_physical_() if conjugated else far).mul_(factor[:, None, None]), grad_w, grad_b


class CompiledTerms:
    """``runtime.compile``: the data term's element-wise work through ``torch.compile``. ``field`` (used without a
    detector blur) runs ``field_loss_terms``, the detector field's intensity, loss terms and gradient field, as one
    compiled loop nest instead of a dozen passes over the batch: on a CPU on the field's real and imaginary parts
    copied apart into planes (the loops then use vector instructions; on the interleaved real view they run one
    element at a time, slower than the eager passes), elsewhere on the halves of the real view, no copy (``planar``
    True or False chooses either everywhere; a GPU's compiled loads need no planes); calling the object runs
    ``intensity_loss_terms`` compiled (with a blur, whose transforms sit between the intensity and the terms). Each
    is compiled once per shape (``dynamic=False``: a batch's last, shorter chunk compiles once more); ``report`` is
    told how long each first call took (the compile). If compiling fails (no C++ compiler, an unsupported platform
    or device), ``report`` is told once and the eager functions are used from then on; an error that the eager
    function raises too is not hidden."""

    def __init__(self, report: Callable[[str], None], planar: bool | None = None) -> None:
        self.report = report
        self.planar = planar
        self.failure: str | None = None
        self.first_call_s: dict[tuple, float] = {}  # compile time of each (function, shapes) compiled so far
        try:
            self.compiled = torch.compile(intensity_loss_terms, dynamic=False)
            self.compiled_field = torch.compile(field_loss_terms, dynamic=False)  # specialised on the parts' strides
        except Exception as exc:  # noqa: BLE001 - any failure means: run eagerly
            self._fall_back(exc)

    def __call__(self, *args):
        if self.failure is None:
            try:
                return self._timed("loss terms", self.compiled, args)
            except Exception as exc:  # noqa: BLE001
                self._fall_back(exc)
        return intensity_loss_terms(*args)

    def field(self, far: torch.Tensor, measured: torch.Tensor, kind: str, weights: torch.Tensor | None,
              background: torch.Tensor | None, mask: torch.Tensor | None, conjugated: bool, terms: Callable | None = None,
              floor_share: torch.Tensor | None = None, floor: float | None = None):
        """``eager_field_terms``'s results from the compiled field pass on the complex field ``far`` (B, ..., K, K),
        contiguous (``terms``: this object's own, unused); the gradient field is a new tensor, not ``far``."""
        if self.failure is None:
            try:
                view = torch.view_as_real(far)
                # on a CPU two copies cost less than loops that run element by element
                parts = ((far.real.contiguous(), far.imag.contiguous())
                         if self.planar or (self.planar is None and far.device.type == "cpu") else view.unbind(-1))
                loss, grad_field, grad_w, grad_b = self._timed(
                    "field", self.compiled_field,
                    (*parts, measured, kind, weights, background, mask, conjugated, floor_share, floor), view.shape)
                grad_field = torch.view_as_complex(grad_field)
                return (loss, grad_field, None if grad_w is None else grad_w.sum(dim=(-2, -1)),
                        None if grad_b is None else grad_b.sum(0))
            except Exception as exc:  # noqa: BLE001
                self._fall_back(exc)
        return eager_field_terms(far, measured, kind, weights, background, mask, conjugated, floor_share=floor_share,
                                 floor=floor)

    def _timed(self, name: str, function: Callable, args: tuple, shape: tuple | None = None):
        """``function(*args)``; the first call for these shapes and flags timed and reported (it compiles) with
        ``shape``, by default the first argument's."""
        key = (name, *(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args))
        if key in self.first_call_s:
            return function(*args)
        start = time.perf_counter()
        result = function(*args)
        self.first_call_s[key] = time.perf_counter() - start
        shape = "x".join(str(n) for n in (args[0].shape if shape is None else shape))
        self.report(f"runtime.compile: the data term's {name} compiled for {shape} in "
                    f"{self.first_call_s[key]:.1f} s (first call)")
        return result

    def _fall_back(self, exc: Exception) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        self.failure = f"{type(exc).__name__}: {first}"
        self.report(f"runtime.compile: torch.compile failed ({self.failure}); running without it")


def compile_wanted(setting: bool | str, device: torch.device) -> bool:
    """Whether ``runtime.compile`` (true, false or auto) compiles on ``device``: auto only on CUDA, where each
    element-wise pass is a kernel launch; on a CPU the compiled passes gain too little for a compile of seconds."""
    return setting is True or (setting == "auto" and torch.device(device).type == "cuda")
