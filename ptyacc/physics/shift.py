"""Stage 1 of the forward chain: the probe modes moved to each position's sub-pixel rest."""

import torch


class ProbeShift:
    """Probe modes (P, K, K) moved by each position's sub-pixel shift:
    probes (B, P, K, K) = ifft2(fft2(probe) * ramps[:, None]), with ``ramps`` (B, K, K) the
    Fourier multipliers of ``shift_ramp``; without ramps the probe itself as (1, P, K, K),
    shared by the whole batch. Linear in the probe (``adjoint``) and in the ramps
    (``ramps_adjoint``: what the gradient with respect to the positions needs).

    The chunked loss (``ptycho_loss``) transforms the probe once per step and walks the batch in
    chunks, one ``ProbeShift`` each: it calls ``from_spectrum`` and ``spectrum_vjp``, which
    ``forward`` and ``adjoint`` are made of."""

    def __init__(self, ramps: torch.Tensor | None) -> None:
        self.ramps = ramps

    def forward(self, probe: torch.Tensor) -> torch.Tensor:
        if self.ramps is None:
            return probe[None]
        return self.from_spectrum(torch.fft.fft2(probe))

    def from_spectrum(self, spectrum: torch.Tensor) -> torch.Tensor:
        """Shifted probes (B, P, K, K) from the probe's spectrum fft2(probe) (P, K, K)."""
        return torch.fft.ifft2(spectrum * self.ramps[:, None])

    def adjoint(self, grad: torch.Tensor) -> torch.Tensor:
        """(P, K, K) from (B or 1, P, K, K): ifft2(sum_b fft2(grad_b) conj(ramps_b)), the adjoint
        of ifft2(fft2(.) ramps) (fft2's adjoint is K^2 ifft2); without ramps the sum over the batch."""
        if self.ramps is None:
            return grad.sum(0)
        return torch.fft.ifft2(self.spectrum_vjp(grad)[0])

    def ramps_adjoint(self, grad: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
        """(B, K, K) from (B, P, K, K): the adjoint of the map ramps -> forward(probe), linear in the ramps."""
        return self.spectrum_vjp(grad, torch.fft.fft2(probe))[1]

    def spectrum_vjp(self, grad: torch.Tensor, spectrum: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """From the gradient (B, P, K, K) with respect to the shifted probes: (sum over the batch
        of fft2(grad) conj(ramps) (P, K, K), which one ifft2 turns into the probe's gradient, so
        that the chunks of a batch add their sums before that one transform; the gradient with
        respect to the ramps (B, K, K) when the probe's ``spectrum`` is given, else None)."""
        grad_x = torch.fft.fft2(grad)  # K^2 times the gradient with respect to spectrum * ramps
        grad_spectrum = (grad_x * self.ramps[:, None].conj()).sum(0)
        if spectrum is None:
            return grad_spectrum, None
        return grad_spectrum, (grad_x * spectrum.conj()).sum(1) / grad.shape[-1] ** 2
