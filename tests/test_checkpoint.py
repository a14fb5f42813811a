"""Reliability: checkpoints and --resume after SIGKILL, atomic writes, the NaN guard, a dead
process, and an output folder that is never overwritten by accident."""

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import ptyacc
from ptyacc.errors import ConfigError, PtyaccError
from ptyacc.reconstruction.checkpoint import latest_checkpoint, save_checkpoint
from ptyacc.speed.speedtest import free_port

ROOT = Path(__file__).parents[1]
WORKER = Path(__file__).with_name("distributed_worker.py")
CPU_CONFIG = ROOT / "configs" / "accelerate" / "cpu_multi_process.yaml"
ITERATIONS = 60


def env() -> dict:
    out = dict(os.environ, OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="1")
    out.pop("WORLD_SIZE", None)
    return out


@pytest.fixture(scope="module")
def kill_config(tmp_path_factory) -> Path:
    """60 iterations of ~50 ms with a checkpoint every 2, positions and probe refined."""
    folder = tmp_path_factory.mktemp("ck")
    config = {
        "data": {"simulate": {"scan_shape": [10, 10], "detector_px": 32, "atoms": 20, "position_jitter_A": 0.05}},
        "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 30.0, "scan_step_A": 0.6, "dx_A": 0.3},
        "optim": {"iterations": ITERATIONS, "batch_size": 10, "start": {"probe": 2, "positions": 3}},
        "output": {"checkpoint_every": 2, "figures": False},
        "runtime": {"progress": False, "seed": 3},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def command(config: Path, out: Path, processes: int, *extra: str, entry: tuple[str, ...] = ("-m", "ptyacc.run")
            ) -> list[str]:
    run = [*entry, str(config), "--set", f"output.dir={out}", "--quiet", *extra]
    if processes == 1:
        return [sys.executable, *run]
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_CONFIG),
            "--num_processes", str(processes), "--main_process_port", str(free_port()), *run]


def run_to_end(config: Path, out: Path, processes: int, *extra: str) -> None:
    done = subprocess.run(command(config, out, processes, *extra), capture_output=True, text=True, timeout=300,
                          env=env())
    assert done.returncode == 0, done.stderr[-3000:]


def kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    """SIGKILL the launcher and every process it started once ``ready()`` holds. The launcher's
    workers run in sessions of their own (torch's elastic agent starts them so), so killing the
    launcher's process group alone would leave them running; and a SIGKILLed worker takes a
    moment to die after its launcher has been reaped."""
    end = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < end, "timed out waiting to kill"
        time.sleep(0.05)
    family = [proc.pid, *descendants(proc.pid)]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    end = time.monotonic() + 60
    while any(running(pid) for pid in family):
        assert time.monotonic() < end, "the killed processes did not end"
        time.sleep(0.05)


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, ...), None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def descendants(pid: int) -> list[int]:
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and (_stat(int(p)) or [0, 0])[1] == str(pid)]
    return children + [d for child in children for d in descendants(child)]


def running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


_UNINTERRUPTED: dict = {}


def uninterrupted_run(config: Path, processes: int) -> ptyacc.Results:
    """The reference: the same config on the same number of processes, never interrupted."""
    if processes not in _UNINTERRUPTED:
        out = config.parent / f"uninterrupted{processes}"
        run_to_end(config, out, processes)
        _UNINTERRUPTED[processes] = ptyacc.load_results(out / "results.h5")
    return _UNINTERRUPTED[processes]


@pytest.fixture(scope="module")
def uninterrupted(kill_config) -> ptyacc.Results:
    return uninterrupted_run(kill_config, 1)


HOLD_AFTER_10 = """
import sys, time
import ptyacc.reconstruction.checkpoint as ck
real = ck.write_checkpoint_file
def hold(path, state):
    if state["iterations_done"] == 12:   # checkpoint 10 is whole and in place: wait to be killed
        time.sleep(300)
    real(path, state)
ck.write_checkpoint_file = hold
from ptyacc.run import run_main
sys.exit(run_main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_sigkill_then_resume_equals_an_uninterrupted_run(kill_config, processes, tmp_path):
    """Killed with SIGKILL after 10+ iterations, resumed with --resume: the same final object,
    positions and loss history as a run on as many processes that was never interrupted. The killed
    run waits before its checkpoint at 12 (a quiet machine could otherwise finish all 60 iterations
    between two looks at the folder)."""
    uninterrupted = uninterrupted_run(kill_config, processes)
    out = tmp_path / "run"
    script = tmp_path / "hold_after_10.py"
    script.write_text(HOLD_AFTER_10)
    proc = subprocess.Popen(command(kill_config, out, processes, entry=(str(script),)), env=env(),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, lambda: (out / "checkpoints" / "ckpt_000010.pt").exists())
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "results.h5").exists()
    found = latest_checkpoint(out)
    assert found is not None and found[1]["iterations_done"] == 10
    resume_and_compare(kill_config, out, processes, uninterrupted)
    assert "resumed from" in (out / "run.log").read_text()


def resume_and_compare(config: Path, out: Path, processes: int, uninterrupted: ptyacc.Results) -> None:
    """Run ``config`` to its end with --resume in ``out``: the same loss history, object and
    positions as the ``uninterrupted`` run."""
    run_to_end(config, out, processes, "--resume")
    resumed = ptyacc.load_results(out / "results.h5")
    assert len(resumed.loss) == len(uninterrupted.loss)
    np.testing.assert_allclose(resumed.loss, uninterrupted.loss, rtol=1e-5)
    relative = np.linalg.norm(resumed.object - uninterrupted.object) / np.linalg.norm(uninterrupted.object)
    assert relative < 1e-4, relative
    np.testing.assert_allclose(resumed.positions_A, uninterrupted.positions_A, atol=1e-4)


SLOW_WRITE = """
import sys, time
import ptyacc.reconstruction.checkpoint as ck
real = ck.write_checkpoint_file
def slow(path, state):
    if state["iterations_done"] == 6:   # the 3rd checkpoint: write half of it, then hang
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
            f.flush()
        time.sleep(120)
    real(path, state)
ck.write_checkpoint_file = slow
from ptyacc.commands.cli import main
sys.exit(main(["run", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_kill_during_a_checkpoint_save_leaves_the_previous_one_usable(kill_config, uninterrupted, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, str(kill_config), "--set", f"output.dir={out}",
                             "--quiet"], env=env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, lambda: any(p.name.startswith(".ckpt_000006") for p in (out / "checkpoints").glob(".*")))
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert "ckpt_000004.pt" in names and "ckpt_000006.pt" not in names  # the half file kept its temporary name
    path, state = latest_checkpoint(out)
    assert path.name == "ckpt_000004.pt" and state["iterations_done"] == 4
    run_to_end(kill_config, out, 1, "--resume")
    resumed = ptyacc.load_results(out / "results.h5")
    np.testing.assert_allclose(resumed.loss, uninterrupted.loss, rtol=1e-5)


def test_damaged_newest_checkpoint_is_skipped(tmp_path):
    """A final-named file that does not load (a copy cut short) is passed over for the previous one."""
    state = {"iterations_done": 2, "model": {"w": torch.ones(3)}, "optimizers": [], "loss": [1.0, 0.5]}
    save_checkpoint(tmp_path, state, keep=5)
    save_checkpoint(tmp_path, {**state, "iterations_done": 4}, keep=5)
    (tmp_path / "checkpoints" / "ckpt_000006.pt").write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="ckpt_000006.pt: skipped"):
        path, loaded = latest_checkpoint(tmp_path)
    assert path.name == "ckpt_000004.pt" and loaded["loss"] == [1.0, 0.5]
    save_checkpoint(tmp_path, {**state, "iterations_done": 8}, keep=2)  # pruning keeps the 2 newest
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["ckpt_000006.pt", "ckpt_000008.pt"]


def small_config(tmp_path, **optim):
    from conftest import tiny_config

    config = tiny_config(tmp_path, optim={"iterations": 6, **optim})
    return ptyacc.load_config(config)


@pytest.mark.slow
def test_existing_results_are_not_overwritten(tmp_path):
    config = small_config(tmp_path)
    ptyacc.reconstruct(config)
    before = (tmp_path / "out" / "results.h5").stat().st_mtime_ns
    with pytest.raises(ConfigError, match=r"output.dir: .* already holds results.h5; pass --overwrite"):
        ptyacc.reconstruct(config)
    assert (tmp_path / "out" / "results.h5").stat().st_mtime_ns == before
    ptyacc.reconstruct(config, overwrite=True)
    with pytest.raises(ConfigError, match="--resume given but .* holds no complete checkpoint"):
        ptyacc.reconstruct(config, resume=True)


@pytest.mark.slow
def test_resuming_with_another_object_optimizer_is_refused_by_name(tmp_path):
    """A checkpoint written with Adam for the object (optim.object_optimizer: adam) cannot continue
    with the preconditioned descent (the one-slice default since), nor the other way round: the
    states differ, so the resume stops and names the key."""
    config = small_config(tmp_path, object_optimizer="adam", probe_optimizer="adam")
    config = dataclasses.replace(config, output=dataclasses.replace(config.output, checkpoint_every=2))
    ptyacc.reconstruct(config)
    default = dataclasses.replace(config, optim=dataclasses.replace(config.optim, object_optimizer="auto"))
    with pytest.raises(ConfigError, match="written with adam for optim.object_optimizer, this config steps it with "
                                          "preconditioned"):
        ptyacc.reconstruct(default, resume=True)
    probe = dataclasses.replace(config, optim=dataclasses.replace(config.optim, probe_optimizer="preconditioned"))
    with pytest.raises(ConfigError, match="written with adam for optim.probe_optimizer"):
        ptyacc.reconstruct(probe, resume=True)
    ptyacc.reconstruct(config, resume=True)  # the same optimizers continue


def poison_object_once(at_iteration: int):
    """An on_step callback that makes the object NaN once, at the first step of an iteration."""
    done = []

    def on_step(iteration, indices):
        if iteration == at_iteration and not done:
            from ptyacc.reconstruction.distributed import get_attribute

            model = on_step.model
            with torch.no_grad():
                get_attribute(model, "object")[0, 0, 5, 5, 0] = float("nan")
            done.append(True)

    return on_step


def run_with_poison(config, at_iteration):
    """reconstruct with a NaN written into the live model at ``at_iteration``."""
    from ptyacc.reconstruction.distributed import make_accelerator

    accelerator = make_accelerator(config.runtime)
    on_step = poison_object_once(at_iteration)
    original = accelerator.prepare

    def prepare(*objects):
        prepared = original(*objects)
        on_step.model = prepared[0]
        return prepared

    accelerator.prepare = prepare
    return ptyacc.reconstruct(config, accelerator=accelerator, on_step=on_step)


@pytest.mark.slow
def test_nan_stops_with_the_iteration_and_parameter_and_keeps_the_last_good_state(tmp_path):
    config = small_config(tmp_path)
    with pytest.raises(PtyaccError, match=r"loss became nan at iteration 3 \(non-finite values in: object.*\); "
                                          r"the last good state \(after 3 iterations\)"):
        run_with_poison(config, 3)
    saved = ptyacc.load_results(tmp_path / "out" / "results.h5")
    assert len(saved.loss) == 3 and np.isfinite(saved.loss).all() and np.isfinite(saved.object).all()


@pytest.mark.slow
def test_nan_rollback_retries_with_lower_learning_rates(tmp_path):
    config = small_config(tmp_path, on_nan="rollback")
    rec = run_with_poison(config, 3)
    assert len(rec.loss) == 6 and np.isfinite(rec.loss).all()
    log = (tmp_path / "out" / "run.log").read_text()
    assert "iteration 3: loss nan (non-finite: object" in log and "rolled back, learning rates x0.5" in log


@pytest.mark.slow
def test_a_dead_process_stops_the_others_with_a_message_naming_it(kill_config, tmp_path):
    """Rank 1 is SIGKILLed at iteration 12: the run ends (well within runtime.timeout_s) with a
    non-zero exit, the launcher names the failed rank, and the last checkpoint is usable."""
    out = tmp_path / "run"
    timeout_s = 60
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_CONFIG),
                           "--num_processes", "2", "--main_process_port", str(free_port()), str(WORKER),
                           str(kill_config), str(tmp_path / "records"), "--die-rank", "1", "--die-at", "12",
                           "--set", f"output.dir={out}", "--set", f"runtime.timeout_s={timeout_s}"],
                          capture_output=True, text=True, timeout=timeout_s + 120, env=env())
    elapsed = time.monotonic() - start
    assert done.returncode != 0
    assert elapsed < timeout_s + 60
    report = done.stdout + done.stderr
    assert "rank" in report and ("exitcode  : -9" in report or "Signals.SIGKILL" in report), report[-2000:]
    path, state = latest_checkpoint(out)
    assert 10 <= state["iterations_done"] <= 12


SLOW_RESULTS = """
import sys, time
import h5py
real = h5py.Group.create_dataset
saves = []
def slow(self, name, *args, **kwargs):
    if name == "loss":
        saves.append(1)
        if len(saves) == 2:   # the second save of results.h5: hang half-way through the file
            time.sleep(120)
    return real(self, name, *args, **kwargs)
h5py.Group.create_dataset = slow
from ptyacc.commands.cli import main
sys.exit(main(["run", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_kill_during_a_results_save_keeps_the_previous_results(kill_config, tmp_path):
    """results.h5 is written under a temporary name and renamed: killed half-way through the
    second save, the folder still holds the complete first results.h5."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_RESULTS, str(kill_config), "--set", f"output.dir={out}",
                             "--set", "output.save_every=5", "--set", "output.checkpoint_every=0", "--quiet"],
                            env=env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, lambda: (out / "results.h5").exists() and any(out.glob(".results.h5.tmp*")))
    time.sleep(0.5)
    saved = ptyacc.load_results(out / "results.h5")  # complete and readable
    assert len(saved.loss) == 5


@pytest.mark.slow
def test_init_from_a_previous_results_file(tmp_path):
    """model.init_from starts from a results.h5: with zero learning rates the object and probe
    come back unchanged, a continued run starts at the previous run's loss, and a config with more
    probe modes starts its first from the saved probe."""
    from conftest import tiny_config

    first = tiny_config(tmp_path / "a", optim={"iterations": 4, "start": {"positions": 1}})
    rec = ptyacc.reconstruct(ptyacc.load_config(first))
    previous = tmp_path / "a" / "out" / "results.h5"
    frozen = tiny_config(tmp_path / "b", model={"init_from": str(previous)},
                         optim={"iterations": 1, "lr": {"object": 0.0, "probe": 0.0, "positions": 0.0}})
    again = ptyacc.reconstruct(ptyacc.load_config(frozen), write=False)
    np.testing.assert_allclose(again.results.probe, rec.results.probe, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(again.results.positions_A, rec.results.positions_A, atol=1e-4)
    px = (rec.results.positions_A - np.asarray(rec.results.origin_A)) / rec.results.dx_A
    (r0, c0), (r1, c1) = np.ceil(px.min(0)).astype(int), np.floor(px.max(0)).astype(int)
    shift = np.round((np.asarray(rec.results.origin_A) - np.asarray(again.results.origin_A)) / rec.results.dx_A)
    dy, dx = shift.astype(int)
    np.testing.assert_allclose(again.results.object[..., r0 + dy:r1 + dy, c0 + dx:c1 + dx],
                               rec.results.object[..., r0:r1, c0:c1], atol=1e-6)
    continued = tiny_config(tmp_path / "c", model={"init_from": str(previous)}, optim={"iterations": 1})
    assert ptyacc.reconstruct(ptyacc.load_config(continued), write=False).loss[0] < 0.5 * rec.loss[0]
    other = tiny_config(tmp_path / "d", model={"init_from": str(previous), "probe_modes": 2, "orthogonalize_probe": False},
                        optim={"iterations": 1, "lr": {"object": 0.0, "probe": 0.0, "positions": 0.0}})
    more = ptyacc.reconstruct(ptyacc.load_config(other), write=False)  # other modes: the first is the saved one
    np.testing.assert_allclose(more.results.probe[0], rec.results.probe[0], rtol=1e-5, atol=1e-6)
