"""runtime.compile: the compiled loss terms, their fallback, and the option end to end."""

import h5py
import numpy as np
import pytest
import torch
from conftest import tiny_config

import ptyacc
from ptyacc.physics.chain import intensity_loss_terms
from ptyacc.physics.fused import CompiledTerms


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
    assert messages == [] and compiled.failure is None
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
