"""The forward chain, probe shift -> object patches -> multislice -> detection -> data fidelity, in one
place: its stages, each with its forward and its adjoint. ``detected_intensities`` (prediction.py) runs
their forwards with autograd for prediction, simulation and the saved mean pattern; the training loss
``ptycho_loss`` (fused.py) runs the same stages' forward and backward in chunks.

Stage 1, ``ProbeShift``: the probe modes moved to each position's sub-pixel rest.
Stage 2, ``Patches``: the object's windows under the probe at each position.
Stage 3, ``Multislice``: multislice exit waves with incoherent probe and object modes.
Stage 4, ``Detect``: exit waves to the field at the detector (far or near field), intensities summed over
the modes and blurred by its point spread (``DetectorBlur``, detector_blur.py), and the detector's
response (gain per pattern, background: ``detector_response``).
Stage 5, the data fidelity: how well intensities fit measured ones, for training and for evaluation.
Losses are SUMS over the given patterns; the caller divides by the global batch size.
- amplitude: sum over pixels of (sqrt(I) - sqrt(M))^2 (Gaussian noise on amplitudes)
- poisson:   sum over pixels of I - M log(I) (Poisson negative log-likelihood, data term dropped; below the cap
             (M - 1) / POISSON_PULL_CAP its tangent there, so that a dark model's pull on many counts stays bounded)
with I the model intensity (``detector_response``) plus EPS (Poisson: plus POISSON_FLOOR), and M the measured one,
over the pixels of the detector's mask. Each formula is written once and serves the hand-written gradient of the
chunked loss (``intensity_loss_terms``, with the gain's and the background's), the autograd reference
(``loss_from_intensities``; ``far_field_loss`` in fused.py) and the final model's deviance (deviance.py).
"""

import functools
from dataclasses import dataclass

import torch

from ptyacc.physics.detector_blur import DetectorBlur

EPS = 1e-8
# Counts added to the model intensity in the Poisson loss: a pixel the model leaves dark where counts were measured
# pulls with M / 0.01 at most instead of M / 1e-8. Without it the demo's first steps were so sensitive that 1 and 2
# processes (apart by rounding, 1e-7) parted by 7.5e-2 after 8 iterations; with 0.01 they agree to 2.4e-6, and the
# demo's NCC rises at every dose (0.003: 5e-3 apart; 0.1: 3e-7 apart but 0.06 lower at 5e3:
# benchmarks/records/2026-11-27-benchmarks.md, 'The loss').
POISSON_FLOOR = 0.01
# The Poisson loss's pull in a pixel, its derivative in the model intensity I, is 1 - M / I: unbounded where the
# model leaves dark a pixel that holds many counts M, as a flat start object does beyond the bright-field disk of a
# strongly scattering crystal. Below I = (M - 1) / POISSON_PULL_CAP the loss goes on along its tangent there, so that
# no pull exceeds POISSON_PULL_CAP M / (M - 1) - 1; above, it is the likelihood itself. One count is never capped (two
# only where the model holds under 1/32 of a count), so counts as sparse as 1e3-1e4 electrons per pattern keep their
# pull; the model comes within the cap once it fits. Uncapped, abTEM's SrTiO3 of 10 unit cells at 1e6 electrons per
# pattern ended at a phase NCC of 0.50 (the amplitude loss 0.998), capped at 0.998; with the cap at M / 32 (no count
# spared), the thin samples at 1e3 electrons lost up to 0.04. Three operators more per eager step (the demo 5 % longer)
# (benchmarks/records/2026-12-07-poisson-pull-cap.md).
POISSON_PULL_CAP = 32.0
POISSON_CAP_SPARED_COUNTS = 1.0
# The amplitude loss's floor, a share of the brightest pixel of the mean pattern (a run's ``amplitude_floor``; the
# bare EPS where none is given). From a flat object the model leaves the dark field at rounding level (1e-7 of the
# field), and the gradient sqrt(M) far / |far| there takes its direction from that rounding: one step of the
# selftest's problem moved by 3.1 % when the patterns were scaled by 1 + 1e-7, and CUDA's step parted from the CPU's
# by 7 %. With 1e-6 of the peak: 3e-5 (benchmarks/records/2026-12-04-second-gpu.md, 'The cause').
AMPLITUDE_FLOOR_SHARE = 1e-6
LOSS_KINDS = ("amplitude", "poisson")
_CONSTANTS: dict[tuple, torch.Tensor] = {}  # ``_constant``'s

# ------------------------------------------------------------------ stage 1: probe shift

class ProbeShift:
    """Probe modes (P, K, K) moved by each position's sub-pixel shift: probes (B, P, K, K) = ifft2(fft2(probe) *
    ramps[:, None]), with ``ramps`` (B, K, K) the Fourier multipliers of ``shift_ramp``; without ramps the probe
    itself as (1, P, K, K), shared by the whole batch. Linear in the probe (``adjoint``) and in the ramps
    (``ramps_adjoint``: the positions' gradient needs it). A probe per position (B, P, K, K) (``probe_variation``,
    scans) is shifted alike; its adjoints keep the batch axis. The chunked loss (``ptycho_loss``) transforms the
    probe once per step and calls ``from_spectrum`` and ``spectrum_vjp`` per chunk, which ``forward`` and ``adjoint``
    are made of; their ``spectrum`` is fft2(probe, norm="forward"): the small transform scales, the batch's does not."""

    def __init__(self, ramps: torch.Tensor | None) -> None:
        self.ramps = ramps

    def forward(self, probe: torch.Tensor) -> torch.Tensor:
        if self.ramps is None:
            return probe if probe.dim() == 4 else probe[None]
        return self.from_spectrum(torch.fft.fft2(probe, norm="forward"))

    def from_spectrum(self, spectrum: torch.Tensor) -> torch.Tensor:
        """Shifted probes (B, P, K, K) from fft2(probe, norm="forward") (P, K, K), or (B, P, K, K) per position."""
        return torch.fft.ifft2(spectrum * self.ramps[:, None], norm="forward")

    def adjoint(self, grad: torch.Tensor, per_position: bool = False) -> torch.Tensor:
        """(P, K, K) from (B or 1, P, K, K): ifft2(sum_b fft2(grad_b) conj(ramps_b)), the adjoint
        of ifft2(fft2(.) ramps) (fft2's adjoint is K^2 ifft2); without ramps the sum over the batch;
        ``per_position`` (a probe per position): (B, P, K, K), not summed."""
        if self.ramps is None:
            return grad if per_position else grad.sum(0)
        return torch.fft.ifft2(self.spectrum_vjp(grad, per_position=per_position)[0])

    def ramps_adjoint(self, grad: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
        """(B, K, K) from (B, P, K, K): the adjoint of the map ramps -> forward(probe), linear in the ramps."""
        return self.spectrum_vjp(grad, torch.fft.fft2(probe, norm="forward"))[1]

    def spectrum_vjp(self, grad: torch.Tensor, spectrum: torch.Tensor | None = None, per_position: bool = False,
                     conjugated: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """From the gradient (B, P, K, K) with respect to the shifted probes: (sum over the batch of fft2(grad)
        conj(ramps) (P, K, K) (each term (B, P, K, K) with ``per_position``), which one ifft2 turns into the probe's
        gradient, so the chunks add their sums before that transform; the ramps' gradient (B, K, K) given the probe's
        ``spectrum`` fft2(probe, norm="forward") (P or B, P, K, K), else None). ``conjugated``
        (``Multislice.vjp_all``): conj of ``grad`` and of the first result."""
        conj, fft2, _ = _adjoint_parts(conjugated)
        grad_x = fft2(grad)  # K^2 times the gradient with respect to spectrum * ramps
        grad_spectrum = grad_x * conj(self.ramps[:, None])
        if not per_position:
            grad_spectrum = grad_spectrum.sum(0)
        if spectrum is None:
            return grad_spectrum, None
        grad_ramps = _sum_axis(grad_x * conj(spectrum), 1)  # the spectrum's 1 / K^2: fft2's adjoint
        return grad_spectrum, grad_ramps.conj_physical_() if conjugated else grad_ramps


# ------------------------------------------------------------------ stage 2: patches
class Patches:
    """Windows (B, ..., size, size) of an image (..., Ny, Nx) whose pixel [0, 0] sits at ``top_left`` (B, 2) integer
    (row, column), inside the image. ``forward`` indexes a strided view of all windows (rows of ``size`` contiguous
    pixels: several times faster than a flat gather); ``adjoint`` scatter-adds windows back, overlaps adding up."""

    def __init__(self, top_left: torch.Tensor, size: int) -> None:
        self.top_left = top_left
        self.size = size

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        windows = image.unfold(-2, self.size, 1).unfold(-2, self.size, 1)  # (..., Ny-size+1, Nx-size+1, size, size)
        return windows[..., self.top_left[:, 0], self.top_left[:, 1], :, :].movedim(-3, 0)

    def adjoint(self, patches: torch.Tensor, image_shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
        """The image (image_shape) that is the sum of the ``patches`` (B, ..., size, size) put at their windows."""
        image = torch.zeros(image_shape, dtype=patches.dtype, device=patches.device)
        self.add_adjoint(image, patches)
        return image

    def add_adjoint(self, image: torch.Tensor, patches: torch.Tensor) -> None:
        """Add ``adjoint(patches)`` into ``image`` (..., Ny, Nx), contiguous, in place: a batch's chunks add up."""
        *lead, _, nx = image.shape
        corners = torch.add(self.top_left[:, 1], self.top_left[:, 0], alpha=nx)  # (B,) flat index of each corner
        flat_index = (corners[:, None] + _window_offsets(self.size, nx, image.device)).reshape(-1)
        image.view(*lead, -1).index_add_(-1, flat_index, patches.movedim(0, -3).reshape(*lead, -1))


@functools.lru_cache(maxsize=16)
def _window_offsets(size: int, nx: int, device: torch.device) -> torch.Tensor:
    """(size * size,) long: a size x size window's flat indices from its corner in an image nx wide, made once."""
    return (torch.arange(size, device=device)[:, None] * nx + torch.arange(size, device=device)).reshape(-1)


def extract_patches(image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
    """``Patches(top_left, size).forward(image)`` for autograd: its backward is the scatter-add
    ``adjoint``, not autograd's generic backward of indexing a strided view."""
    return _ExtractPatches.apply(image, top_left, size)


class _ExtractPatches(torch.autograd.Function):
    @staticmethod
    def forward(ctx, image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
        ctx.save_for_backward(top_left)
        ctx.image_shape, ctx.size = image.shape, size
        return Patches(top_left, size).forward(image)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (top_left,) = ctx.saved_tensors
        return Patches(top_left, ctx.size).adjoint(grad, ctx.image_shape), None, None


# ------------------------------------------------------------------ stage 4: detection (before stage 3, which uses it)
@dataclass
class Detector:
    """How exit waves become measured intensities, beyond the far-field FFT.

    propagator: (K, K) complex, unshifted: near field, the field is ifft2(fft2(wave) * propagator), not fft2(wave).
    mask:       (K, K) float, unshifted: 1 for pixels that count in the loss, 0 for bad ones.
    blur_variance_px2: () real, the point spread's variance (``DetectorBlur``), or None for none.

    A near-field image stays with the beam while the sample moves. The model puts each probe window on the object's
    pixel grid and shifts the probe by the sub-pixel rest s (``ramps`` (B, K, K) from ``shift_ramp``), so the
    window's image must be shifted back by -s to land on the detector's pixels, or the beam's own fringes jitter by
    up to half a pixel between patterns. ``Detect`` folds that shift into the propagator, at no extra FFT. In the
    far field such a shift is a phase ramp that leaves the intensity unchanged: the ramps are ignored there."""

    propagator: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    blur_variance_px2: torch.Tensor | None = None

    def field(self, waves: torch.Tensor, ramps: torch.Tensor | None = None) -> torch.Tensor:
        return Detect(self, ramps).forward(waves)

    def adjoint(self, grad_field: torch.Tensor, ramps: torch.Tensor | None = None) -> torch.Tensor:
        return Detect(self, ramps).adjoint(grad_field)


class Detect:
    """The detector field of a batch's exit waves (B, ..., K, K), modes between batch and pixels: fft2
    (orthonormal) in the far field; F* T F in the near field, with F the orthonormal fft2 and the transfer function
    T = propagator * conj(ramps) (B, K, K), which also shifts each image back by its probe's sub-pixel shift
    (``Detector``). Orthonormal, so ``adjoint`` is the inverse. ``mask`` (for the data fidelity) and ``blur``
    (``intensity``'s) are the detector's. ``prescaled``: the waves come divided by K (the caller scaled the small
    probe): no transform scales (fft2's norm "backward", ifft2's "forward"), the near field's transfer function
    carries the second 1 / K, and the field is the same (the same bits for K a power of 2)."""

    def __init__(self, detector: Detector, ramps: torch.Tensor | None = None, prescaled: bool = False) -> None:
        self.mask = detector.mask
        self.blur = DetectorBlur(detector.blur_variance_px2) if detector.blur_variance_px2 is not None else None
        self.ramps = ramps if detector.propagator is not None else None
        self.norms = ("backward", "forward") if prescaled else ("ortho", "ortho")
        propagator = self.propagator = detector.propagator if detector.propagator is None or not prescaled \
            else detector.propagator * (1.0 / detector.propagator.shape[-1])
        self.transfer = None if propagator is None else propagator if ramps is None else ramps.conj() * propagator

    def forward(self, waves: torch.Tensor) -> torch.Tensor:
        return self.forward_with_spectrum(waves)[0]

    def intensity(self, field: torch.Tensor) -> torch.Tensor:
        """(B, K, K): the detector ``field``'s intensity summed over the modes, blurred by the point spread."""
        return summed_intensity(field) if self.blur is None else self.blur(summed_intensity(field))

    def forward_with_spectrum(self, waves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The field and, in the near field, its spectrum T F waves (the ramps' gradient in ``vjp`` needs it), else None."""
        far = torch.fft.fft2(waves, norm=self.norms[0])
        if self.transfer is None:
            return far, None
        spectrum = far * self._transfer(waves.dim(), self.transfer)
        return torch.fft.ifft2(spectrum, norm=self.norms[1]), spectrum

    def adjoint(self, grad_field: torch.Tensor) -> torch.Tensor:
        return self.vjp(grad_field)[0]

    def vjp(self, grad_field: torch.Tensor, spectrum: torch.Tensor | None = None, conjugated: bool = False
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the gradient with respect to the waves, ``adjoint(grad_field)``; with the near field's ``spectrum``
        from ``forward_with_spectrum`` and ramps, the gradient (B, K, K) with respect to the ramps, else None).
        The ramps are unimodular phase factors: spectrum = G conj(R), so the gradient in R, conj(sum grad_spectrum
        conj(G)), equals R sum conj(grad_spectrum) spectrum. ``conjugated``: conj of the field's and the waves'
        gradients (``Multislice.vjp_all``), not of the ramps'."""
        conj, fft2, ifft2 = _adjoint_parts(conjugated)
        if self.transfer is None:
            return ifft2(grad_field, norm=self.norms[1]), None
        grad_spectrum = fft2(grad_field, norm=self.norms[0])
        # conj(T) = ramps conj(propagator): the small kernel conjugated, not the (B, K, K) transfer function
        adjoint = self.transfer if conjugated else self.propagator.conj() if self.ramps is None \
            else self.ramps * self.propagator.conj()
        grad_waves = ifft2(grad_spectrum * self._transfer(grad_field.dim(), adjoint), norm=self.norms[1])
        if spectrum is None or self.ramps is None:
            return grad_waves, None
        per_mode = conj(grad_spectrum) * spectrum
        per_mode = per_mode.reshape(per_mode.shape[0], -1, *per_mode.shape[-2:])  # the mode axes between batch and pixels
        return grad_waves, self.ramps * _sum_axis(per_mode, 1)

    def _transfer(self, ndim: int, transfer: torch.Tensor) -> torch.Tensor:
        """``transfer`` (T or conj(T)) shaped for fields with ``ndim`` dimensions: (B, 1, ..., K, K) with ramps."""
        if self.ramps is None:
            return transfer
        return transfer.reshape(transfer.shape[0], *([1] * (ndim - 3)), *transfer.shape[-2:])


def summed_intensity(far: torch.Tensor) -> torch.Tensor:
    """|far|^2 summed over the mode axes between batch and pixels: (B, ..., K, K) -> (B, K, K): re^2 + im^2 of the
    squared real view (vectorised: faster on CPU than abs()**2 or summing the view's last axis)."""
    squares = torch.view_as_real(far).square()
    power = squares[..., 0] + squares[..., 1]
    power = power.reshape(far.shape[0], -1, *far.shape[-2:])
    return power[:, 0] if power.shape[1] == 1 else power.sum(1)


# ------------------------------------------------------------------ stage 3: multislice
def transmission(amplitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """Complex transmission amplitude * exp(i phase) from two real tensors of any shape."""
    return torch.polar(amplitude, phase)


class Multislice:
    """Exit waves (B, P, O, K, K) complex of every probe mode through every object mode.

    probes:     (B, P, K, K) complex, each probe mode at its scan position (or (1, P, K, K), shared by the batch).
    patches:    (B, O, S, K, K) complex object transmissions: O object modes, S slices.
    propagator: (K, K) complex Fresnel kernel between slices, or (B, K, K), one per position
                (a tilt per position, ``tilted_propagator``); unused when S == 1.
    exit_ramps: (B, K, K) complex factors of each position's exit wave (of every mode), or None: the phase ramp
                that moves its far-field pattern by the descan (``quantities/descan_ramp.py``). The last slice's
                transmission multiplies the exit wave too, so the ramp is folded into that slice's windows
                ((B, O, K, K) products, not (B, P, O, K, K)), and that slice's gradient takes conj(ramp).

    The wave is transmitted by slice 0, propagated, transmitted by slice 1, ... and the last slice is not
    propagated: 2 (S - 1) FFTs here, plus one to the detector. The propagator carries the inverse transform's
    1 / K^2 (``scaled``): no transform scales the waves (the same bits for K a power of 2). The exit waves are
    linear in the probes and in each slice on its own (not in all slices together): ``vjp`` gives the gradients
    with respect to both, which for the probes, and for one slice with the others held, is that map's adjoint."""

    def __init__(self, propagator: torch.Tensor | None, exit_ramps: torch.Tensor | None = None) -> None:
        self.exit_ramps = None if exit_ramps is None else exit_ramps[:, None]  # (B, 1, K, K): over the object modes
        self.per_position = propagator is not None and propagator.dim() == 3
        # one kernel per position broadcasts over the probe and object modes: (B, 1, 1, K, K)
        self.propagator = propagator[:, None, None] if self.per_position else propagator
        self.scaled = None if propagator is None else self.propagator * (1.0 / (propagator.shape[-1] * propagator.shape[-2]))

    def forward(self, probes: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        return self._waves(probes, patches, None)

    def forward_with_incident(self, probes: torch.Tensor, patches: torch.Tensor, spectra: list | None = None
                              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The exit waves and the waves incident on slices 1 .. S-1 (S-1 of (B, P, O, K, K)), which ``vjp`` needs;
        a list ``spectra`` receives the S-1 spectra fft2 of the waves leaving slices 0 .. S-2 (``vjp_all``'s)."""
        incident = []
        return self._waves(probes, patches, incident, spectra), incident

    def _waves(self, probes: torch.Tensor, patches: torch.Tensor, incident: list | None,
               spectra: list | None = None) -> torch.Tensor:
        wave = probes[:, :, None] * self._transmission(patches, 0)  # (B, P, O, K, K)
        for s in range(1, patches.shape[2]):
            spectrum = torch.fft.fft2(wave)
            if spectra is not None:
                spectra.append(spectrum)
            # in place where nothing keeps the spectrum (no autograd, no propagator gradient): no new batch of waves
            kept = spectra is not None or torch.is_grad_enabled()
            wave = torch.fft.ifft2(spectrum * self.scaled if kept else spectrum.mul_(self.scaled), norm="forward")
            if incident is not None:
                incident.append(wave)
            wave = wave * self._transmission(patches, s)
        return wave

    def _transmission(self, patches: torch.Tensor, s: int) -> torch.Tensor:
        """Slice ``s``'s windows (B, 1, O, K, K) as they multiply the waves: the last one times the exit ramps."""
        if self.exit_ramps is None or s < patches.shape[2] - 1:
            return patches[:, None, :, s]
        return (patches[:, :, s] * self.exit_ramps)[:, None]

    def vjp(self, grad: torch.Tensor, probes: torch.Tensor, patches: torch.Tensor, incident: list[torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients (as ``probes``, as ``patches``) from the exit waves' (B, P, O, K, K): ``vjp_all``'s first two."""
        return self.vjp_all(grad, probes, patches, incident)[:2]

    def vjp_all(self, grad: torch.Tensor, probes: torch.Tensor, patches: torch.Tensor, incident: list[torch.Tensor],
                spectra: list[torch.Tensor] | None = None, conjugated: bool = False, consume: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Gradients (shaped as ``probes``, as ``patches``, as the propagator or None without ``spectra``) from
        the gradient (B, P, O, K, K) with respect to the exit waves, slice by slice backwards: for t = a b the
        gradient in a is g conj(b); for a propagation ifft2(fft2(.) H) it is ifft2(fft2(g) conj(H)) in the wave and
        conj(fft2(wave)) fft2(g) / K^2 in H (fft2's adjoint is K^2 ifft2), summed over the slices and the modes
        (and the batch, for one kernel for all); a probe shared by the batch (1, P, K, K) sums over it.

        ``conjugated``: ``grad`` is conj(g), and so are the probes' and patches' gradients (not the propagator's): the
        products take the forward's factors as they are, where torch's ``mul`` copies a conjugated one first (a pass
        over the batch each: incident waves, patches, probes per position). The same bits (``_adjoint_parts``).
        ``consume``: the caller keeps no use of ``patches`` (a fresh gather): with one slice and no exit ramps the plain
        backward conjugates them in place and multiplies into them, instead of copying conj(patches) in ``mul``."""
        n_slices = patches.shape[2]
        grad_slices = [None] * n_slices
        grad_propagator = None
        conj, fft2, ifft2 = _adjoint_parts(conjugated)
        for s in range(n_slices - 1, 0, -1):
            grad_slices[s] = _sum_axis(grad * conj(incident[s - 1]), 1)
            grad_spectrum = fft2(grad * conj(self._transmission(patches, s)))
            if spectra is not None:
                term = conj(spectra[s - 1]) * grad_spectrum
                grad_propagator = term if grad_propagator is None else grad_propagator + term
            grad = ifft2(grad_spectrum.mul_(conj(self.scaled)), norm="forward")
        grad_slices[0] = _sum_axis(grad * conj(probes[:, :, None]), 1)
        if self.exit_ramps is not None:  # the gradient in the last slice's windows, not in their product with the ramps
            grad_slices[-1] = grad_slices[-1] * conj(self.exit_ramps)
        # stacked as (O, S, B, K, K) in memory: the layout in which ``Patches.add_adjoint`` adds them (a view, not a copy)
        grad_patches = grad_slices[0][:, :, None] if n_slices == 1 else torch.stack(
            [g.movedim(0, 1) for g in grad_slices], dim=1).movedim(2, 0)
        if consume and not conjugated and n_slices == 1 and self.exit_ramps is None:
            windows = patches[:, None, :, 0].conj_physical_()  # grad x conj(patches), operands in that order: same bits
            product = torch.mul(grad, windows, out=windows) if grad.shape == windows.shape else grad * windows
        else:
            product = grad * conj(self._transmission(patches, 0))
        grad_probes = _sum_axis(product, 2)
        if probes.shape[0] == 1:
            grad_probes = grad_probes.sum(0, keepdim=True)
        if grad_propagator is not None:
            k2 = grad.shape[-1] * grad.shape[-2]
            summed = grad_propagator.sum((1, 2)) if self.per_position else grad_propagator.sum(tuple(range(3)))
            grad_propagator = summed.mul_(1.0 / k2)  # (B, K, K) or (K, K); the bits of / k2 (spectrum_vjp)
            grad_propagator = grad_propagator.conj_physical_() if conjugated else grad_propagator
        return grad_probes, grad_patches, grad_propagator


_MIRROR = {"forward": "backward", "backward": "forward", "ortho": "ortho"}


def _adjoint_parts(conjugated: bool) -> tuple:
    """(conj, fft2, ifft2) for a backward; on conjugated gradients (``Multislice.vjp_all``) the forward's factors as
    they are and the transforms swapped: conj(fft2(x, norm)) = ifft2(conj(x), _MIRROR[norm]), bit for bit."""
    if not conjugated:
        return torch.conj, torch.fft.fft2, torch.fft.ifft2
    return ((lambda t: t), lambda t, norm="backward": torch.fft.ifft2(t, norm=_MIRROR[norm]),
            lambda t, norm="backward": torch.fft.fft2(t, norm=_MIRROR[norm]))


def _sum_axis(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim``; a view when it has size 1 (a reduction over it would cost a full pass)."""
    return tensor.squeeze(dim) if tensor.shape[dim] == 1 else tensor.sum(dim)


# ------------------------------------------------------------------ stage 5: the data fidelity
def poisson_nll(intensity: torch.Tensor, measured: torch.Tensor, capped: torch.Tensor | None = None) -> torch.Tensor:
    """Poisson negative log-likelihood per pixel without the term of the data alone: I - M log I where the model
    intensity I is at least the cap C = (M - POISSON_CAP_SPARED_COUNTS) / POISSON_PULL_CAP; below it the tangent at C,
    C - M log C + (1 - M / C) (I - C). ``capped``: max(I, C) where already made (``capped_intensity``). Written as
    I + M - M (log C' + I / C'), C' = max(I, C): four operators, which is I - M log I where C' = I."""
    capped = capped_intensity(intensity, measured) if capped is None else capped
    return torch.addcmul(intensity + measured, measured, torch.addcdiv(torch.log(capped), intensity, capped), value=-1.0)


def capped_intensity(intensity: torch.Tensor, measured: torch.Tensor) -> torch.Tensor:
    """max(I, (M - POISSON_CAP_SPARED_COUNTS) / POISSON_PULL_CAP): where the Poisson loss takes its value and its pull
    1 - M / capped (two operators: the cap in one ``addcmul`` of constants)."""
    share = 1.0 / POISSON_PULL_CAP
    cap = torch.addcmul(_constant(-POISSON_CAP_SPARED_COUNTS * share, measured), measured, _constant(share, measured))
    return torch.maximum(intensity, cap)


def _amplitude(intensity: torch.Tensor, measured: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sqrt(I) - sqrt(M))^2 per pixel, sqrt(M) and sqrt(I): with r their ratio, its derivative in I is 1 - r."""
    amplitude, root_measured = torch.sqrt(intensity), torch.sqrt(measured)
    return (amplitude - root_measured).square(), root_measured, amplitude


def _constant(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-dim tensor of ``value`` of ``like``'s dtype and device, made once (``torch.addcdiv`` adds a tensor)."""
    if torch.compiler.is_compiling():  # a constant of the compiled code; a dict filled by its first call would fail
        return like.new_full((), value)  # its guards on the next call and compile it again
    key = (value, like.dtype, like.device)
    return _CONSTANTS[key] if key in _CONSTANTS else _CONSTANTS.setdefault(key, like.new_full((), value))


def loss_floor(kind: str, floor: float | None = None) -> float:
    """What the loss ``kind`` adds to the model intensity: ``floor`` where given (a run's amplitude floor in its
    patterns' units, ``AMPLITUDE_FLOOR_SHARE``), else the kind's own: EPS (amplitude), POISSON_FLOOR (poisson)."""
    return floor if floor is not None else EPS if kind == "amplitude" else POISSON_FLOOR


def check_kind(kind: str) -> None:
    if kind not in LOSS_KINDS:
        raise ValueError(f"loss must be one of {LOSS_KINDS}, got {kind!r}")


def detector_response(coherent: torch.Tensor, weights: torch.Tensor | None = None,
                      background: torch.Tensor | None = None) -> torch.Tensor:
    """The model intensity (B, K, K): weights (B,) * coherent (B, K, K) + background (K, K),
    each factor optional. All elementwise, so ``torch.compile`` fuses it with the loss terms."""
    intensity = coherent if weights is None else coherent * weights[:, None, None]
    return intensity if background is None else intensity + background


def intensity_loss_terms(coherent: torch.Tensor, measured: torch.Tensor, kind: str,
                         weights: torch.Tensor | None = None, background: torch.Tensor | None = None,
                         mask: torch.Tensor | None = None, summed: bool = True,
                         floor_share: torch.Tensor | None = None, floor: float | None = None):
    """Loss of the coherent intensities ``coherent`` = sum_modes |far|^2 (B, K, K) of detector fields ``far``
    against ``measured`` (B, K, K), with the model intensity I = weights * coherent + background (weights (B,),
    background (K, K), both optional) over the pixels where ``mask`` is 1. All elementwise, so ``torch.compile``
    can fuse it. Returns (loss, factor, grad_weights, grad_background): d loss / d far = factor * far for every
    mode, factor (B, K, K) real; the other two are None when not asked for. Not ``summed``: those two as the
    (B, K, K) terms of their sums, for the caller to sum (``field_loss_terms``). ``floor``: what the loss adds to
    the model intensity, or None: the kind's own (``loss_floor``); ``floor_share`` (B,): each pattern's share of it
    (several scans of one object: its scan's share of their counts), or None: all of it."""
    floor = loss_floor(kind, floor)
    if floor_share is not None:
        floor = floor * floor_share[:, None, None]
    # the floor joins the background (K, K) rather than each pattern: one pass fewer (the sum's order, a rounding apart)
    intensity = (detector_response(coherent, weights, background + floor) if background is not None
                 else detector_response(coherent, weights) + floor)
    if kind == "amplitude":
        per_pixel, numerator, denominator = _amplitude(intensity, measured)
    else:
        denominator = capped_intensity(intensity, measured)
        per_pixel, numerator = poisson_nll(intensity, measured, denominator), measured
    # dL/dI = 1 - num / den; d/d far = 2 dL/dI far. c + (v num) / den in one pass (addcdiv) has the bits of c - |v| r,
    # r = num / den, for v = -1, -2 (a power of 2): 2 - 2 r those of 2 (1 - r), as d (2 w) has those of 2 d w
    if weights is None and background is None and mask is None:
        return per_pixel.sum(), torch.addcdiv(_constant(2.0, intensity), numerator, denominator, value=-2.0), None, None
    d_intensity = torch.addcdiv(_constant(1.0, intensity), numerator, denominator, value=-1.0)
    if mask is not None:
        per_pixel, d_intensity = per_pixel * mask, d_intensity * mask
    grad_weights = None if weights is None else d_intensity * coherent
    grad_background = None if background is None else d_intensity
    if summed:
        grad_weights = None if weights is None else grad_weights.sum(dim=(-2, -1))
        grad_background = None if background is None else grad_background.sum(0)
    factor = 2.0 * d_intensity if weights is None else d_intensity * (2.0 * weights)[:, None, None]
    return per_pixel.sum(), factor, grad_weights, grad_background


def field_loss_terms(real: torch.Tensor, imag: torch.Tensor, measured: torch.Tensor, kind: str,
                     weights: torch.Tensor | None = None, background: torch.Tensor | None = None,
                     mask: torch.Tensor | None = None, conjugated: bool = False,
                     floor_share: torch.Tensor | None = None, floor: float | None = None):
    """From the detector field to the gradient that goes back through it, in one piece for ``torch.compile``:
    the intensity summed over the modes, ``intensity_loss_terms`` and the field's gradient factor * far (conj(far)
    * factor when ``conjugated``: ``Multislice.vjp_all``'s convention). ``real`` and ``imag`` (B, ..., K, K) float
    are the parts of a complex field, modes between batch and pixels: the two halves of its real view (interleaved,
    no copy) or each copied into a contiguous plane, which TorchInductor's CPU loops need for vector instructions
    (on the interleaved view they run one element at a time). Every operation is real and elementwise or a
    reduction, which TorchInductor fuses (it makes no code for complex tensors). Returns (loss, grad_field (B, ...,
    K, K, 2), the real view of a complex gradient field, and the terms (B, K, K) of grad_weights and
    grad_background, or None, which the caller sums: summed by the same operators as the eager path's, they have
    its bits, where a rounding apart in these two gradients grows over the iterations of a run that refines them
    (about 1e-3 of the object after 10 iterations of configs/petra_nearfield.yaml). The loss is summed here: its
    order differs (a rounding)."""
    power = (real * real + imag * imag).reshape(real.shape[0], -1, *real.shape[-2:])
    coherent = power[:, 0] if power.shape[1] == 1 else power.sum(1)
    loss, factor, grad_weights, grad_background = intensity_loss_terms(coherent, measured, kind, weights, background,
                                                                       mask, summed=False, floor_share=floor_share,
                                                                       floor=floor)
    factor = factor.reshape(factor.shape[0], *([1] * (real.dim() - 3)), *factor.shape[-2:])
    grad_field = torch.stack((real * factor, imag * (-factor if conjugated else factor)), dim=-1)
    return loss, grad_field, grad_weights, grad_background


def loss_from_intensities(predicted: torch.Tensor, measured: torch.Tensor, kind: str,
                          reduce: bool = True, floor: float | None = None) -> torch.Tensor:
    """The loss from intensities (B, K, K), with autograd's own gradient (summed unless not ``reduce``);
    ``floor`` as ``intensity_loss_terms``'s."""
    intensity = predicted + loss_floor(kind, floor)
    per_pixel = _amplitude(intensity, measured)[0] if kind == "amplitude" else poisson_nll(intensity, measured)
    return per_pixel.sum() if reduce else per_pixel
