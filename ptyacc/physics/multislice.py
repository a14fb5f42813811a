"""Stage 3 of the forward chain: multislice exit waves with incoherent probe and object modes."""

import torch

from ptyacc.physics.detect import far_field_intensities


def transmission(amplitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """Complex transmission amplitude * exp(i phase) from two real tensors of any shape."""
    return torch.polar(amplitude, phase)


class Multislice:
    """Exit waves (B, P, O, K, K) complex of every probe mode through every object mode.

    probes:     (B, P, K, K) complex, each probe mode already at its scan position
                (or (1, P, K, K), shared by the whole batch).
    patches:    (B, O, S, K, K) complex object transmissions: O object modes, S slices.
    propagator: (K, K) complex Fresnel kernel between slices; unused when S == 1.

    The wave is transmitted by slice 0, propagated, transmitted by slice 1, ... and the last
    slice is not propagated: 2 (S - 1) FFTs here, plus one to the detector.

    The exit waves are linear in the probes and in each slice on its own (not in all slices
    together): ``vjp`` gives the gradients with respect to both, which for the probes, and for
    one slice with the others held, is the adjoint of that linear map."""

    def __init__(self, propagator: torch.Tensor | None) -> None:
        self.propagator = propagator

    def forward(self, probes: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        return self._waves(probes, patches, None)

    def forward_with_incident(self, probes: torch.Tensor, patches: torch.Tensor
                              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The exit waves and the waves incident on slices 1 .. S-1 (S-1 of (B, P, O, K, K)), which ``vjp`` needs."""
        incident = []
        return self._waves(probes, patches, incident), incident

    def _waves(self, probes: torch.Tensor, patches: torch.Tensor, incident: list | None) -> torch.Tensor:
        wave = probes[:, :, None] * patches[:, None, :, 0]  # (B, P, O, K, K)
        for s in range(1, patches.shape[2]):
            wave = torch.fft.ifft2(torch.fft.fft2(wave) * self.propagator)
            if incident is not None:
                incident.append(wave)
            wave = wave * patches[:, None, :, s]
        return wave

    def vjp(self, grad: torch.Tensor, probes: torch.Tensor, patches: torch.Tensor, incident: list[torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients (shaped as ``probes``, as ``patches``) from the gradient (B, P, O, K, K) with
        respect to the exit waves, slice by slice backwards: for t = a b the gradient in a is
        g conj(b); for a propagation ifft2(fft2(.) H) it is ifft2(fft2(g) conj(H)); a probe
        shared by the batch (1, P, K, K) sums over it."""
        n_slices = patches.shape[2]
        grad_slices = [None] * n_slices
        for s in range(n_slices - 1, 0, -1):
            grad_slices[s] = _sum_axis(grad * incident[s - 1].conj(), 1)
            grad = torch.fft.ifft2(torch.fft.fft2(grad * patches[:, None, :, s].conj()) * self.propagator.conj())
        grad_slices[0] = _sum_axis(grad * probes[:, :, None].conj(), 1)
        grad_patches = grad_slices[0][:, :, None] if n_slices == 1 else torch.stack(grad_slices, dim=2)
        grad_probes = _sum_axis(grad * patches[:, None, :, 0].conj(), 2)
        if probes.shape[0] == 1:
            grad_probes = grad_probes.sum(0, keepdim=True)
        return grad_probes, grad_patches


def _sum_axis(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim``; a view when it has size 1 (a reduction over it would cost a full pass)."""
    return tensor.squeeze(dim) if tensor.shape[dim] == 1 else tensor.sum(dim)


def exit_waves(probes: torch.Tensor, transmissions: torch.Tensor, propagator: torch.Tensor | None) -> torch.Tensor:
    """``Multislice(propagator).forward(probes, transmissions)``: see ``Multislice`` for the shapes."""
    return Multislice(propagator).forward(probes, transmissions)


def multislice_intensities(probes: torch.Tensor, transmissions: torch.Tensor,
                           propagator: torch.Tensor | None) -> torch.Tensor:
    """Far-field intensities (B, K, K), unshifted layout, summed over all mode pairs
    (see ``Multislice`` for the shapes): 2 S - 1 FFTs per (pattern, probe mode, object mode)."""
    return far_field_intensities(exit_waves(probes, transmissions, propagator))
