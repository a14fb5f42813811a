"""Interrupted runs keep their work: SIGINT / SIGTERM to a real run (1 and 2 processes) saves a
checkpoint and results.h5, says how to resume, exits 128 + signal, and the resumed run ends
where an uninterrupted one does; checkpoints by wall clock (output.checkpoint_minutes)."""

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import tiny_config
from test_checkpoint import command, env, resume_and_compare, run_to_end

import ptyacc
from ptyacc.config import load_config
from ptyacc.reconstruction.checkpoint import latest_checkpoint

ITERATIONS = 40


@pytest.fixture(scope="module")
def signal_config(tmp_path_factory) -> Path:
    """40 short iterations, no checkpoints by count or time: what is kept comes from the signal."""
    folder = tmp_path_factory.mktemp("sig")
    config = tiny_config(folder, optim={"iterations": ITERATIONS, "batch_size": 6, "start": {"probe": 2, "positions": 3}},
                         output={"figures": False, "checkpoint_minutes": 0})
    config["data"]["simulate"].update(position_jitter_A=0.05)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def interrupt_when_logged(config: Path, out: Path, processes: int, signum: int, line: str) -> subprocess.CompletedProcess:
    """Start the run, send ``signum`` to it (the launcher for several processes, which passes it
    on to every worker) once run.log holds ``line``, and wait for it to end."""
    proc = subprocess.Popen(command(config, out, processes), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 240
    log = out / "run.log"
    while not (log.exists() and line in log.read_text()):
        assert proc.poll() is None, "the run ended before it could be interrupted: " + proc.stderr.read()[-2000:]
        assert time.monotonic() < end, "timed out waiting to interrupt"
        time.sleep(0.05)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("processes, signum", [(1, signal.SIGINT), pytest.param(2, signal.SIGTERM,
                                                                                 marks=pytest.mark.slow)])
def test_a_signal_keeps_the_work_and_resumes_to_the_uninterrupted_answer(signal_config, processes, signum, tmp_path):
    reference = tmp_path / "uninterrupted"
    run_to_end(signal_config, reference, processes)
    uninterrupted = ptyacc.load_results(reference / "results.h5")
    out = tmp_path / "run"
    done = interrupt_when_logged(signal_config, out, processes, signum, f"iteration 3/{ITERATIONS}")
    name = signal.Signals(signum).name
    if processes == 1:
        assert done.returncode == 128 + signum, done.stderr[-3000:]
    else:
        assert done.returncode != 0
    assert f"{name} received: finishing the current step" in done.stderr
    assert f"ptyacc: interrupted by {name} during iteration" in done.stderr, done.stderr[-3000:]
    assert "continue with: " in done.stderr and "--resume" in done.stderr
    assert ("accelerate launch" if processes > 1 else "-m ptyacc.run") in done.stderr
    path, state = latest_checkpoint(out)
    kept = state["iterations_done"]
    assert 3 <= kept < ITERATIONS
    assert f"kept the state after iteration {kept} in {path}" in done.stderr
    saved = ptyacc.load_results(out / "results.h5")
    assert len(saved.loss) == kept
    np.testing.assert_allclose(saved.loss, uninterrupted.loss[:kept], rtol=1e-5)
    resume_and_compare(signal_config, out, processes, uninterrupted)


def test_checkpoints_by_wall_clock_are_on_by_default(tmp_path):
    assert load_config(tiny_config(tmp_path)).output.checkpoint_minutes == 10
    config = load_config(tiny_config(tmp_path, optim={"iterations": 3},
                                     output={"checkpoint_minutes": 1e-9, "figures": False}))
    ptyacc.reconstruct(config)
    kept = sorted(p.name for p in (tmp_path / "out" / "checkpoints").iterdir())
    assert kept == ["ckpt_000001.pt", "ckpt_000002.pt"]  # due after every iteration but the last
    assert latest_checkpoint(tmp_path / "out")[1]["iterations_done"] == 2


def test_several_processes_agree_on_a_signal_every_few_steps_and_at_an_iterations_end(monkeypatch):
    """The all-reduce that makes every process stop at the same step is asked at every 8th step and
    at the iteration's last one (20 steps: 3 all-reduces, not 20); a signal waits at most until then."""
    import types

    import ptyacc.reconstruction.interrupt as interrupt

    asked = []
    monkeypatch.setattr(interrupt, "agreed_max", lambda accelerator, value: asked.append(value) or value)
    watch = interrupt.Interrupt(types.SimpleNamespace(num_processes=2))
    watch.active = True
    answers = [watch.requested(step, last=step == 19) for step in range(20)]
    assert len(asked) == 3 and answers == [0] * 20
    asked.clear()
    watch.signum = signal.SIGTERM
    answers = [watch.requested(step, last=step == 19) for step in range(9)]
    assert answers == [0] * 7 + [signal.SIGTERM, 0] and len(asked) == 1


def test_a_signal_after_the_last_steps_question_is_not_swallowed(tmp_path, monkeypatch):
    """A signal that comes after the last step asked (during the last iteration's hooks) used to
    be dropped when the run left its listening context, so a study of many trials ran on after
    Ctrl-C. Now the run finishes, saves its results, then stops with Interrupted (exit 130)."""
    from ptyacc.reconstruction.interrupt import Interrupt, Interrupted

    monkeypatch.setattr(Interrupt, "requested", lambda self, step=0, last=True: 0)  # the loop never sees it
    config = load_config(tiny_config(tmp_path, optim={"iterations": 3}, output={"figures": False}))

    sent = []

    def late(iteration, indices):
        if iteration == 2 and not sent:  # once: a second one stops at once by design
            sent.append(signal.raise_signal(signal.SIGINT))

    with pytest.raises(Interrupted, match="SIGINT received after the last iteration's last step") as caught:
        ptyacc.reconstruct(config, on_step=late)
    assert caught.value.exit_code == 130
    assert len(ptyacc.load_results(tmp_path / "out" / "results.h5").loss) == 3  # finished and saved first
