"""runtime.compile: the compiled loss terms and detector-field pass, their fallback, and the option end to end."""

import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config

import ptyacc
from ptyacc.physics import Detector, exit_waves, extract_patches, far_field_loss, ptycho_loss, shift_ramp
from ptyacc.physics.chain import field_loss_terms, intensity_loss_terms
from ptyacc.physics.fused import CompiledTerms, compile_wanted, eager_field_terms
from ptyacc.speed.speedtest import free_port


def _terms_inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    coherent = torch.rand(4, 8, 8, generator=generator) * 5
    measured = torch.poisson(coherent * 1.3, generator=generator)
    weights = 0.5 + torch.rand(4, generator=generator)
    background = torch.rand(8, 8, generator=generator) * 0.1
    mask = (torch.rand(8, 8, generator=generator) > 0.2).float()
    return coherent, measured, weights, background, mask


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["amplitude", "poisson"])
def test_compiled_loss_terms_equal_the_eager_ones(kind):
    """torch.compile really runs (no fallback) and gives the eager values to float rounding."""
    messages = []
    compiled = CompiledTerms(report=messages.append)
    coherent, measured, weights, background, mask = _terms_inputs()
    got = compiled(coherent, measured, kind, weights, background, mask)
    want = intensity_loss_terms(coherent, measured, kind, weights, background, mask)
    assert compiled.failure is None and len(messages) == 1 and messages[0].endswith("s (first call)"), messages
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_compile_failure_falls_back_once_with_a_message(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no working C++ compiler\nmore detail")

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: broken)
    messages = []
    compiled = CompiledTerms(report=messages.append)
    inputs = _terms_inputs(1)
    for _ in range(3):
        got = compiled(*inputs[:2], "poisson", *inputs[2:])
    want = intensity_loss_terms(*inputs[:2], "poisson", *inputs[2:])
    assert len(messages) == 1 and "RuntimeError: no working C++ compiler" in messages[0]
    assert "running without it" in messages[0]
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    # an error the eager function raises as well is not swallowed
    with pytest.raises(RuntimeError):
        compiled(inputs[0], inputs[1][:2], "poisson")


@pytest.mark.slow
def test_run_with_compile_that_fails_tells_the_user_and_matches_eager(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("inductor unavailable")

    runs = {}
    for name, compile_on in (("eager", False), ("compiled", True)):
        config = ptyacc.load_config(tiny_config(tmp_path / name, runtime={"compile": compile_on, "progress": False,
                                                                           "seed": 3}))
        if compile_on:
            monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: broken)
        runs[name] = ptyacc.reconstruct(config)
    log = (tmp_path / "compiled" / "out" / "run.log").read_text()
    assert "runtime.compile: torch.compile failed (RuntimeError: inductor unavailable)" in log
    assert "runtime.compile" in capsys.readouterr().err
    assert runs["compiled"].loss == runs["eager"].loss
    with h5py.File(tmp_path / "eager" / "out" / "results.h5") as a, \
            h5py.File(tmp_path / "compiled" / "out" / "results.h5") as b:
        np.testing.assert_array_equal(a["object"][()], b["object"][()])


def _problem(slices, probe_modes, shifted, near_field, seed=0, k=6, batch=5):
    """float64 inputs of ``ptycho_loss`` (as tests/test_fused.py's): probe, object, corners, shift fractions (or
    None), slice propagator (or None), measured, detector (mask, near field or far), weights, background."""
    g = torch.Generator().manual_seed(seed)

    def rand_complex(*shape):
        return torch.complex(torch.randn(*shape, generator=g, dtype=torch.float64),
                             torch.randn(*shape, generator=g, dtype=torch.float64))

    probe = rand_complex(probe_modes, k, k).requires_grad_()
    obj = rand_complex(1, slices, 10, 11).requires_grad_()
    top_left = torch.stack([torch.randint(0, 5, (batch,), generator=g), torch.randint(0, 6, (batch,), generator=g)], 1)
    fraction = (torch.rand(batch, 2, generator=g, dtype=torch.float64) - 0.5).requires_grad_() if shifted else None
    propagator = torch.exp(2j * torch.pi * torch.rand(k, k, generator=g, dtype=torch.float64)) if slices > 1 else None
    measured = 5 * torch.rand(batch, k, k, generator=g, dtype=torch.float64)
    near = torch.exp(2j * torch.pi * torch.rand(k, k, generator=g, dtype=torch.float64)) if near_field else None
    detector = Detector(propagator=near, mask=(torch.rand(k, k, generator=g) > 0.2).double())
    weights = (1 + 0.2 * torch.rand(batch, generator=g, dtype=torch.float64)).requires_grad_()
    background = (0.3 * torch.rand(k, k, generator=g, dtype=torch.float64)).requires_grad_()
    return probe, obj, top_left, fraction, propagator, measured, detector, weights, background


def test_field_loss_terms_match_the_complex_formulas():
    """The pass, eager, on the halves of the real view and on contiguous planes, against the loss and its gradient
    field written on complex numbers (NumPy)."""
    g = torch.Generator().manual_seed(2)
    far = torch.complex(torch.randn(3, 2, 1, 4, 4, generator=g, dtype=torch.float64),
                        torch.randn(3, 2, 1, 4, 4, generator=g, dtype=torch.float64))
    measured = 3 * torch.rand(3, 4, 4, generator=g, dtype=torch.float64)
    f, m = far.numpy(), measured.numpy()
    intensity = (np.abs(f) ** 2).sum(axis=(1, 2)) + 0.01
    for conjugated in (False, True):
        for parts in (torch.view_as_real(far).unbind(-1), (far.real.contiguous(), far.imag.contiguous())):
            loss, grad, _, _ = field_loss_terms(*parts, measured, "poisson", conjugated=conjugated)
            grad = torch.view_as_complex(grad).numpy()
            factor = 2 * (1 - m / intensity)[:, None, None]
            assert float(loss) == pytest.approx((intensity - m * np.log(intensity)).sum(), rel=1e-12)
            np.testing.assert_allclose(grad, factor * (np.conj(f) if conjugated else f), rtol=1e-12)


@pytest.mark.processes
@pytest.mark.slow
def test_both_layouts_of_the_compiled_field_pass_have_the_eager_bits():
    """The compiled field pass, planar (a CPU's default) and interleaved (other devices'), float32, Poisson loss with
    mask, gain and background, two modes, conjugated: the gradient field and the gain's and background's gradients
    equal the eager pass's bit for bit; the loss (summed in another order) to rounding."""
    g = torch.Generator().manual_seed(4)
    far = torch.complex(torch.randn(6, 2, 1, 12, 12, generator=g), torch.randn(6, 2, 1, 12, 12, generator=g))
    measured = torch.poisson(5 * torch.rand(6, 12, 12, generator=g), generator=g)
    extras = (1 + 0.1 * torch.rand(6, generator=g), 0.1 * torch.rand(12, 12, generator=g),
              (torch.rand(12, 12, generator=g) > 0.2).float())
    want = eager_field_terms(far.clone(), measured, "poisson", *extras, True)
    for planar in (True, False):
        messages = []
        compiled = CompiledTerms(report=messages.append, planar=planar)
        got = compiled.field(far.clone(), measured, "poisson", *extras, True)
        assert compiled.failure is None and messages[0].startswith(
            "runtime.compile: the data term's field compiled for 6x2x1x12x12x2 in"), messages
        torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=0)
        for mine, eager in zip(got[1:], want[1:], strict=True):
            assert torch.equal(mine, eager), planar


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("kind, slices, probe_modes, shifted, near_field, extras, chunk", [
    ("amplitude", 1, 1, False, False, False, 64),  # the demo's kind of step: one chunk, plain field
    ("poisson", 3, 2, True, False, False, 2),  # conjugated gradients, modes, chunks of 2 and 1
    ("poisson", 2, 2, True, True, True, 2),  # near field, mask, weights, background
])
def test_compiled_field_pass_in_the_step_equals_autograd(kind, slices, probe_modes, shifted, near_field, extras, chunk):
    """``ptycho_loss`` with the compiled detector-field pass (float64): value and every gradient equal autograd's
    through the plain physics functions (tests/test_fused.py's reference), and the compile really ran."""
    probe, obj, top_left, fraction, propagator, measured, detector, weights, background = _problem(
        slices, probe_modes, shifted, near_field)
    detector = detector if extras else Detector()
    weights, background = (weights, background) if extras else (None, None)
    k = probe.shape[-1]
    ramps = shift_ramp(fraction, k) if shifted else None
    inputs = tuple(t for t in (probe, obj, fraction, weights, background) if t is not None)
    messages = []
    compiled = CompiledTerms(report=messages.append)
    fused = ptycho_loss(probe, obj, top_left, ramps, propagator, measured, kind, chunk, detector, weights, background,
                        terms=compiled, field_terms=compiled.field)
    fused_grads = torch.autograd.grad(fused, inputs)
    ramps = shift_ramp(fraction, k) if shifted else None  # a graph of its own: the first grad freed the other
    probes = probe[None] if ramps is None else torch.fft.ifft2(torch.fft.fft2(probe)[None] * ramps[:, None])
    reference = far_field_loss(exit_waves(probes, extract_patches(obj, top_left, k), propagator), measured, kind,
                               detector, weights, background, ramps=ramps)
    reference_grads = torch.autograd.grad(reference, inputs)
    assert compiled.failure is None and len(compiled.first_call_s) == (1 if chunk >= 5 else 2), messages
    assert all("(first call)" in text for text in messages)
    assert float(fused.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    for mine, theirs in zip(fused_grads, reference_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-10)


def test_compile_auto_is_on_for_cuda_only():
    assert compile_wanted("auto", torch.device("cuda", 0)) and not compile_wanted("auto", torch.device("cpu"))
    assert compile_wanted(True, torch.device("cpu")) and not compile_wanted(False, torch.device("cuda"))


def _objects(folder) -> np.ndarray:
    with h5py.File(folder / "results.h5") as results:
        return results["object"][()]


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_compiled_run_equals_the_eager_run(tmp_path, processes):
    """10 iterations (Poisson loss, refined positions: the conjugated backward) with runtime.compile true and false,
    on 1 process and on 2 (accelerate launch, gloo on the CPU): the objects agree to 1e-5 (relative), and run.log
    gives the compile's time."""
    for compile_on in (False, True):
        config = tiny_config(tmp_path / str(compile_on), optim={"iterations": 10, "batch_size": 8, "loss": "poisson",
                                                               "start": {"positions": 1}},
                             runtime={"compile": compile_on, "progress": False, "seed": 3})
        path = tmp_path / f"{compile_on}.yaml"
        path.write_text(yaml.safe_dump(config))
        launcher = [sys.executable] if processes == 1 else [
            sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--main_process_port", str(free_port())]
        done = subprocess.run([*launcher, "-m", "ptyacc.run", str(path)], capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="1"))
        assert done.returncode == 0, done.stderr[-3000:]
    eager, compiled = _objects(tmp_path / "False" / "out"), _objects(tmp_path / "True" / "out")
    assert np.linalg.norm(compiled - eager) <= 1e-5 * np.linalg.norm(eager)
    log = (tmp_path / "True" / "out" / "run.log").read_text()
    assert re.search(r"runtime.compile: the data term's field compiled for \d+x1x1x16x16x2 in [0-9.]+ s \(first call\)",
                     log), log[-2000:]
    assert "compiled for" not in (tmp_path / "False" / "out" / "run.log").read_text()


def test_compile_key_takes_true_false_and_auto():
    values = {setting: ptyacc.load_config("configs/demo.yaml", [f"runtime.compile={setting}"]).runtime.compile
              for setting in ("auto", "true", "false", "on", "off")}
    assert values == {"auto": "auto", "true": True, "false": False, "on": True, "off": False}
    with pytest.raises(ptyacc.ConfigError, match="runtime.compile.*'maybe'"):
        ptyacc.load_config("configs/demo.yaml", ["runtime.compile=maybe"])
