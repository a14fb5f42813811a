"""The least work of one reconstruction step, timed against the step's FFTs alone (benchmarks/records/2026-11-27-performance.md,
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

`--case petra`: the step of configs/petra_nearfield.yaml (batch 10, 100 px, near field): the probe
shifted per position (ifft2 of its spectrum times the ramps), the propagation to the detector with
each image shifted back (fft2, times conj(ramps) x propagator, ifft2), a bad-pixel mask, intensity
weights and background, with the gradients of the ramps (the positions' gradient up to the ramps'
own, outside the data term), the weights and the background; timed against the six transforms that
`ptyacc.speed.bench.fft_bound_s` counts for it.

    python benchmarks/step_floor.py                 # batch 32, 64 px, torch's default threads
    python benchmarks/step_floor.py --threads 1 --batch 64
    python benchmarks/step_floor.py --case petra --threads 1 --cpu-clock   # the PETRA near-field step, CPU seconds
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ptyacc.physics import Detector, ptycho_loss, shift_ramp
from ptyacc.reconstruction.heap import keep_freed_memory
from ptyacc.speed.bench import ffts_per_step

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


def least_near_field_step(obj, probe, ramps, weights, background, mask, index, propagator, measured):
    """The PETRA-shaped step: loss and gradients (object, probe, ramps, weights, background) of a near-field
    Poisson step with the probe shifted per position, one operator per pass. The backward runs on conjugated
    gradients (benchmarks/records/2026-11-27-performance.md, "Conjugated factors"): every product takes the forward's
    factors as they are."""
    batch, k = measured.shape[0], probe.shape[-1]
    spectrum = torch.fft.fft2(probe * (1.0 / k), norm="forward")  # K x K: the batch's transforms scale nothing
    probes = torch.fft.ifft2(ramps * spectrum, norm="forward")  # the probe shifted per position
    windows = obj.reshape(-1)[index].reshape(batch, k, k)
    far = torch.fft.fft2(windows * probes)
    conj_ramps = ramps.conj_physical()
    transfer = conj_ramps * (propagator * (1.0 / k))  # the propagator times the image's shift back
    near = far.mul_(transfer)  # the detector's spectrum, kept for the ramps' gradient
    field = torch.fft.ifft2(near, norm="forward")
    real = torch.view_as_real(field)
    coherent = torch.addcmul(real[..., 0].square(), real[..., 1], real[..., 1])
    intensity = torch.addcmul(background + FLOOR, coherent, weights[:, None, None])
    per_pixel = torch.addcmul(intensity, measured, torch.log(intensity), value=-1.0)
    loss = torch.mv(per_pixel.reshape(batch, -1), mask.reshape(-1)).sum()
    d_intensity = torch.addcdiv(torch.tensor(1.0), measured, intensity, value=-1.0).mul_(mask)
    grad_weights = torch.bmm(d_intensity.reshape(batch, 1, -1), coherent.reshape(batch, -1, 1)).reshape(batch)
    grad_background = d_intensity.sum(0)
    # conj of each gradient from here on: conj(fft2(x, norm)) = ifft2(conj(x), mirrored norm)
    grad_field = field.conj_physical_().mul_(d_intensity.mul_((2.0 * weights)[:, None, None]))
    grad_near = torch.fft.ifft2(grad_field, norm="forward")
    grad_waves = torch.fft.fft2(grad_near * transfer)
    grad_ramps = grad_near.mul_(near)  # the image's shift back: ramps x conj(grad) x spectrum, times ramps below
    grad_probes = windows.mul_(grad_waves)
    grad_obj = torch.zeros(obj.numel(), dtype=obj.dtype)
    grad_obj.index_add_(0, index.reshape(-1), probes.mul_(grad_waves).conj_physical_().reshape(-1))
    grad_shifted = torch.fft.ifft2(grad_probes, norm="forward").conj_physical_()  # fft2 of the probes' gradient
    grad_ramps.mul_(ramps).add_(grad_shifted * spectrum.conj())
    grad_probe = torch.fft.ifft2(grad_shifted.mul_(conj_ramps).sum(0)).mul_(1.0 / k)
    return loss, grad_obj.reshape(obj.shape), grad_probe, grad_ramps, grad_weights, grad_background


def demo_case(batch, k, generator):
    """The demo's step: (least step, ptycho_loss with its backward, checks (name, mine, ptyacc's), the FFTs)."""
    n = 3 * k
    obj = torch.polar(torch.ones(n, n), torch.rand(n, n, generator=generator))
    probe = torch.randn(k, k, dtype=torch.complex64, generator=generator) / k
    top_left = torch.randint(0, n - k, (batch, 2), generator=generator)
    index = _window_index(top_left, k, n)
    measured = torch.poisson(torch.rand(batch, k, k, generator=generator) * 4)
    obj_p, probe_p = obj[None, None].clone().requires_grad_(), probe[None].clone().requires_grad_()

    def fused():
        return ptycho_loss(probe_p, obj_p, top_left, None, None, measured, "poisson")

    fused().backward()
    mine = least_step(obj, probe, index, measured)
    theirs = (fused().detach(), obj_p.grad[0, 0], probe_p.grad[0])
    waves = measured.to(torch.complex64)

    def ffts():  # fft2 + ifft2 of the batch: the FFT bound's part of one step
        torch.fft.ifft2(torch.fft.fft2(waves))

    return (lambda: least_step(obj, probe, index, measured), lambda: fused().backward(),
            zip(("loss", "object gradient", "probe gradient"), mine, theirs), ffts)


def petra_case(batch, k, generator):
    """The PETRA near-field step (configs/petra_nearfield.yaml): its object's 209 x 215 pixels, the probe shifted
    per position, a propagator to the detector, a bad-pixel mask, intensity weights, background, Poisson."""
    ny, nx = 2 * k + 9, 2 * k + 15
    obj = torch.polar(torch.rand(ny, nx, generator=generator) * 0.5 + 0.5, torch.rand(ny, nx, generator=generator))
    probe = torch.randn(k, k, dtype=torch.complex64, generator=generator) / k
    top_left = torch.stack([torch.randint(0, ny - k, (batch,), generator=generator),
                            torch.randint(0, nx - k, (batch,), generator=generator)], 1)
    index = _window_index(top_left, k, nx)
    ramps = shift_ramp(torch.rand(batch, 2, generator=generator) - 0.5, k)
    propagator = torch.polar(torch.ones(k, k), 6.3 * torch.rand(k, k, generator=generator))
    mask = (torch.rand(k, k, generator=generator) > 0.02).float()
    weights = torch.rand(batch, generator=generator) + 0.5
    background = torch.rand(k, k, generator=generator) * 0.1
    measured = torch.poisson(torch.rand(batch, k, k, generator=generator) * 4)
    inputs = [probe[None], obj[None, None], ramps, weights, background]
    probe_p, obj_p, ramps_p, weights_p, background_p = params = [t.clone().requires_grad_() for t in inputs]
    detector = Detector(propagator=propagator, mask=mask)

    def fused():
        return ptycho_loss(probe_p, obj_p, top_left, ramps_p, None, measured, "poisson", detector=detector,
                           weights=weights_p, background=background_p)

    fused().backward()
    args = (obj, probe, ramps, weights, background, mask, index, propagator, measured)
    mine = least_near_field_step(*args)
    theirs = (fused().detach(), obj_p.grad[0, 0], probe_p.grad[0], *(p.grad for p in params[2:]))
    names = ("loss", "object gradient", "probe gradient", "ramps' gradient", "weights' gradient",
             "background's gradient")
    waves, probes = measured.to(torch.complex64), measured.to(torch.complex64)

    def ffts():  # the transforms of ptyacc.speed.bench.fft_bound_s for this step, the same count and kinds
        for _ in range(ffts_per_step(1, False, near_field=True)):
            torch.fft.fft2(waves)
        torch.fft.ifft2(probes)
        torch.fft.fft2(probes)

    return lambda: least_near_field_step(*args), lambda: fused().backward(), zip(names, mine, theirs), ffts


def _window_index(top_left, k, nx):
    offsets = (torch.arange(k)[:, None] * nx + torch.arange(k)[None, :]).reshape(-1)
    return (top_left[:, 0] * nx + top_left[:, 1])[:, None] + offsets[None]


CASES = {"demo": (demo_case, 32, 64), "petra": (petra_case, 10, 100)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="demo")
    parser.add_argument("--batch", type=int, default=None, help="default: the case's (demo 32, petra 10)")
    parser.add_argument("--window", type=int, default=None, help="default: the case's (demo 64, petra 100)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cpu-clock", action="store_true",
                        help="CPU seconds of the process (with --threads 1: what a busy machine's other work leaves out)")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_clock else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as a run does on the CPU (reconstruction/heap.py): no page faults for new batches
    make, batch, k = CASES[args.case]
    batch, k = args.batch or batch, args.window or k
    least, fused, checks, ffts = make(batch, k, torch.Generator().manual_seed(0))
    # the same work as ptyacc's data term: loss and gradients agree on these inputs
    for name, mine, theirs in checks:
        error = float((mine - theirs).abs().max() / theirs.abs().max())
        if error > 1e-4:
            raise SystemExit(f"the least step's {name} differs from ptycho_loss's by {error:.1e} of its largest value")
    print(f"checked: the least step's loss and gradients equal ptycho_loss's ({args.case}, batch {batch}, {k} px, "
          f"{torch.get_num_threads()} threads)")

    cases = {"FFTs alone": ffts, "least step": least, "ptycho_loss": fused}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, run in cases.items():
            run()
            start = clock()
            for _ in range(20):
                run()
            times[name].append((clock() - start) / 20)
    bound = statistics.median(times["FFTs alone"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:12s} {median * 1e3:7.3f} ms  ratio {median / bound:5.2f}  "
              f"(spread {min(values) * 1e3:.3f}-{max(values) * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
