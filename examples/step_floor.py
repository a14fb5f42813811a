"""The least work of one reconstruction step, timed against the step's FFTs alone (docs/performance.md,
"The least step"): how low `ptyacc bench`'s ratio can go with one eager operator per elementwise pass.

A demo-shaped step (one probe mode shared by the batch, one object mode, one slice, Poisson loss,
the probe shifted once per step as the demo's equal sub-pixel rests allow) written as the shortest
run of torch operators that computes its loss and its object and probe gradients: gather the
windows, the exit waves, fft2, the intensity with its floor, the loss (log, dot), the loss factor,
the field times it, ifft2, the windows' and the probe's gradients, the scatter-add into the object.
Before timing, its loss and gradients are checked against ptyacc's own data term
(`ptyacc.physics.ptycho_loss`) on the same inputs, so both do the same work. Then, interleaved in
one process: the FFTs alone (fft2 + ifft2 of the batch: the FFT bound's part of one step), this
least step, and `ptycho_loss`. One line each; ratios against the FFTs.

    python examples/step_floor.py                 # batch 32, 64 px, torch's default threads
    python examples/step_floor.py --threads 1 --batch 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ptyacc.physics import ptycho_loss
from ptyacc.reconstruction.heap import keep_freed_memory

FLOOR = 0.01  # ptyacc's Poisson floor (physics/chain.py POISSON_FLOOR)


def least_step(obj, probe, index, measured):
    """Loss, object gradient (flat) and probe gradient of a Poisson step, one operator per pass."""
    batch, k = measured.shape[0], probe.shape[-1]
    probe = probe * (1.0 / k)  # fft2 of it is the orthonormal transform's (ptyacc's detector), scaled on K x K only
    windows = obj.reshape(-1)[index].reshape(batch, k, k)
    far = torch.fft.fft2(windows * probe)
    real = torch.view_as_real(far)
    intensity = torch.addcmul(real[..., 0].square().add_(FLOOR), real[..., 1], real[..., 1])
    loss = intensity.sum() - torch.dot(measured.reshape(-1), torch.log(intensity).reshape(-1))
    far.mul_(torch.addcdiv(torch.tensor(2.0), measured, intensity, value=-2.0))
    grad = torch.fft.ifft2(far, norm="forward")  # fft2's adjoint
    grad_probe = windows.conj_physical_().mul_(grad).sum(0).mul_(1.0 / k)
    grad_obj = torch.zeros(obj.numel(), dtype=obj.dtype)
    grad_obj.index_add_(0, index.reshape(-1), grad.mul_(probe.conj()).reshape(-1))
    return loss, grad_obj.reshape(obj.shape), grad_probe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as a run does on the CPU (reconstruction/heap.py): no page faults for new batches
    batch, k, n = args.batch, args.window, 3 * args.window
    generator = torch.Generator().manual_seed(0)
    obj = torch.polar(torch.ones(n, n), torch.rand(n, n, generator=generator))
    probe = torch.randn(k, k, dtype=torch.complex64, generator=generator) / k
    top_left = torch.randint(0, n - k, (batch, 2), generator=generator)
    offsets = (torch.arange(k)[:, None] * n + torch.arange(k)[None, :]).reshape(-1)
    index = (top_left[:, 0] * n + top_left[:, 1])[:, None] + offsets[None]
    measured = torch.poisson(torch.rand(batch, k, k, generator=generator) * 4)

    # the same work as ptyacc's data term: loss and gradients agree on these inputs
    obj_p, probe_p = obj[None, None].clone().requires_grad_(), probe[None].clone().requires_grad_()
    ptycho_loss(probe_p, obj_p, top_left, None, None, measured, "poisson").backward()
    loss, grad_obj, grad_probe = least_step(obj, probe, index, measured)
    reference = ptycho_loss(probe[None], obj[None, None], top_left, None, None, measured, "poisson")
    for name, mine, theirs in (("loss", loss, reference), ("object gradient", grad_obj, obj_p.grad[0, 0]),
                               ("probe gradient", grad_probe, probe_p.grad[0])):
        error = float((mine - theirs).abs().max() / theirs.abs().max())
        if error > 1e-4:
            raise SystemExit(f"the least step's {name} differs from ptycho_loss's by {error:.1e} of its largest value")
    print(f"checked: the least step's loss and gradients equal ptycho_loss's (batch {batch}, {k} px, "
          f"{torch.get_num_threads()} threads)")

    waves = measured.to(torch.complex64)

    def ffts():
        torch.fft.ifft2(torch.fft.fft2(waves))

    def fused():
        ptycho_loss(probe_p, obj_p, top_left, None, None, measured, "poisson").backward()

    cases = {"FFTs alone": ffts, "least step": lambda: least_step(obj, probe, index, measured),
             "ptycho_loss": fused}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, run in cases.items():
            run()
            start = time.perf_counter()
            for _ in range(20):
                run()
            times[name].append((time.perf_counter() - start) / 20)
    bound = statistics.median(times["FFTs alone"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:12s} {median * 1e3:7.3f} ms  ratio {median / bound:5.2f}  "
              f"(spread {min(values) * 1e3:.3f}-{max(values) * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
