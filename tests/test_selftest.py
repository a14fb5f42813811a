"""`ptyacc selftest`: every check reported, the CPU's run, CUDA skipped with its reason where
there is none, a failed check makes the exit code non-zero, and the agreement tolerance."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ptyacc.commands.cli import main
from ptyacc.speed import selftest

ALL_CHECKS = ["build", "devices", "mig", "backend", "reconstruct cpu", "reconstruct cuda", "reconstruct mps",
              "hold host", "hold disk", "speed", "syncs", "compile", "two processes"]
ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--skip", "compile", "--skip", "two"]  # compile: tests/test_compile.py; two processes: the slow test below


def _report(path):
    report = json.loads(path.read_text())
    return {c["name"]: c for c in report["checks"]}, report


def test_selftest_runs_the_cpu_checks_and_says_what_it_skipped(tmp_path, capsys):
    code = main(["selftest", "--json", str(tmp_path / "st.json"), *QUICK])
    checks, report = _report(tmp_path / "st.json")
    assert code == 0, checks
    assert list(checks) == ALL_CHECKS
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == [name.split()[0] for name in ALL_CHECKS]  # one line per check
    for name in ("build", "devices", "backend", "reconstruct cpu", "hold host", "hold disk", "speed", "syncs"):
        assert checks[name]["status"] == "ok", checks[name]
    loss = checks["reconstruct cpu"]["figures"]["loss"]
    assert loss[-1] < 0.5 * loss[0]  # it reconstructs: the data misfit falls
    assert checks["backend"]["figures"]["backend"] == ("nccl" if torch.cuda.is_available() else "gloo")
    for name in ("hold host", "hold disk"):  # the streamed modes on the CPU repeat `device` bit for bit
        assert checks[name]["figures"]["relative_difference"] <= selftest.AGREEMENT_RTOL
    if torch.cuda.is_available():
        assert checks["reconstruct cuda"]["status"] == "ok", checks["reconstruct cuda"]
    else:
        assert checks["reconstruct cuda"]["status"] == "skipped"
        assert checks["reconstruct cuda"]["detail"].startswith("no CUDA GPU")
        assert checks["mig"] == {"name": "mig", "status": "skipped", "detail": "no CUDA GPU", "figures": {}}
    assert checks["compile"]["detail"] == "not asked (--skip)"
    assert report["counts"]["failed"] == 0 and report["tolerance_relative"] == selftest.AGREEMENT_RTOL
    assert checks["speed"]["figures"]["fft_bound_s"] > 0 and checks["speed"]["figures"]["peak_memory_bytes"] > 0
    assert checks["syncs"]["figures"]["counted"]["operators_per_step"] > 20


def test_a_failed_check_makes_the_exit_code_nonzero(tmp_path, monkeypatch, capsys):
    """A comparison that finds a difference (here: a device whose results are off by 1 %) fails
    its check with the figure; the other checks still run and the command exits 1."""
    real = selftest.run_problem

    def off_when_streamed(folder, device, hold="device", **runtime):
        state = real(folder, device, hold, **runtime)
        if hold == "disk":
            state["object"] = state["object"] * 1.01
        return state

    monkeypatch.setattr(selftest, "run_problem", off_when_streamed)
    code = main(["selftest", "--json", str(tmp_path / "st.json"), *QUICK, "--skip", "speed", "--skip", "syncs"])
    checks, report = _report(tmp_path / "st.json")
    assert code == 1
    assert checks["hold disk"]["status"] == "failed"
    assert "object differs by 1.00e-02 relative (tolerance 0.001)" in checks["hold disk"]["detail"]
    assert checks["hold host"]["status"] == "ok" and report["counts"]["failed"] == 1
    assert "1 failed (hold disk)" in capsys.readouterr().err


def test_a_check_that_breaks_fails_alone_with_its_error(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    monkeypatch.setattr("ptyacc.speed.bench.run_bench", broken)
    test = selftest.Selftest(tmp_path, skip=("reconstruct", "hold", "syncs", "compile", "two"))
    checks = {c.name: c for c in test.run(echo=lambda line: None)}
    assert checks["speed"].status == "failed"
    assert checks["speed"].detail == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert checks["build"].status == "ok" and checks["reconstruct cpu"].status == "skipped"


def test_agreement_within_the_tolerance_and_beyond():
    rng = np.random.default_rng(0)
    ref = {"object": rng.normal(size=(4, 5)), "loss": np.array([3.0, 2.0]), "compile_failure": None}
    near = {**ref, "object": ref["object"] * (1 + 1e-5)}
    assert selftest.agree(ref, dict(ref), "same")["bit_identical"]
    figures = selftest.agree(near, ref, "near")
    assert not figures["bit_identical"] and figures["largest_in"] == "object"
    assert figures["relative_difference"] == pytest.approx(1e-5, rel=1e-6)
    with pytest.raises(selftest.Mismatch, match="far: loss differs by 5.00e-03 relative"):
        selftest.agree({**ref, "loss": ref["loss"] * 1.005}, ref, "far")
    with pytest.raises(selftest.Mismatch):
        selftest.agree({**ref, "object": ref["object"] * np.nan}, ref, "nan")


@pytest.mark.processes  # selftest launches two processes itself
def test_two_processes_against_one_on_cpus(tmp_path):
    """The 2-process check (run on 2+ GPUs) launched here on CPUs with gloo."""
    selftest.write_problem(tmp_path)
    single = selftest.run_problem(tmp_path, "cpu")
    detail, figures = selftest.two_process_run(tmp_path, "cpu", single)
    assert figures["relative_difference"] <= 1e-5, detail  # on CPUs the split batch repeats 1 process to float rounding


def test_two_ranks_on_one_gpu_only_with_gloo(monkeypatch):
    """NCCL refuses two ranks on one GPU: ptyacc says so in one line; gloo may share it (how the
    selftest and the suite run two processes on one GPU)."""
    from ptyacc.errors import DistributedError
    from ptyacc.reconstruction import distributed

    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(distributed.torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3")
    distributed._check_gpu_count({"LOCAL_WORLD_SIZE": "2"}, backend="gloo")
    with pytest.raises(DistributedError, match="NCCL cannot put two processes on one GPU.*runtime.backend: gloo"):
        distributed._check_gpu_count({"LOCAL_WORLD_SIZE": "2"}, backend="nccl")


def test_two_ranks_on_one_gpu_run_without_accelerates_device_map():
    """Seen on an H200: Accelerate gave rank 1 of two on one GPU the device id 1 for DDP, and DDP's first
    forward failed (IndexError in its stream list). With more processes than GPUs ptyacc asks Accelerate for
    no device map (DDP then takes the model's GPU); with enough GPUs it leaves the map alone."""
    import inspect

    from accelerate import Accelerator

    from ptyacc.reconstruction import distributed

    environ = {"LOCAL_WORLD_SIZE": "2"}
    assert distributed._share_gpus(environ, visible=1) and environ["ACCELERATE_BYPASS_DEVICE_MAP"] == "true"
    environ = {"LOCAL_WORLD_SIZE": "2"}
    assert not distributed._share_gpus(environ, visible=2) and "ACCELERATE_BYPASS_DEVICE_MAP" not in environ
    assert "ACCELERATE_BYPASS_DEVICE_MAP" in inspect.getsource(Accelerator.prepare_model)  # the switch still exists


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate's process-wide state forgotten before and after the test."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_a_run_on_another_device_than_the_last_one_in_this_process_gets_its_own(monkeypatch, fresh_accelerate_state):
    """Seen on an H200: Accelerate keeps the first Accelerator's device for the whole Python process, so the
    selftest's GPU checks, made after its CPU check, ran on the CPU and reported 'equals the CPU's bit for bit'
    (a notebook's CPU run, then its GPU run, the same). A state held on another device (here the meta device,
    standing in for a GPU) is forgotten in a process of its own; where it stays, the run refuses.
    (Accelerate itself refuses the other order, a CPU run after a GPU run.)"""
    from accelerate.state import PartialState

    from ptyacc.config import RuntimeConfig
    from ptyacc.errors import DistributedError
    from ptyacc.reconstruction import distributed

    for name in ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.make_accelerator(RuntimeConfig(device="cpu")).device.type == "cpu"
    PartialState._shared_state["device"] = torch.device("meta")  # as if the last run had been on another device
    assert distributed.make_accelerator(RuntimeConfig(device="cpu")).device.type == "cpu"
    # a GPU asked (the meta device stands in) where the state stays on the CPU, as in a launched process
    monkeypatch.setattr(distributed, "_forget_other_device", lambda device_type: None)
    monkeypatch.setattr(distributed, "resolve_device", lambda requested: "meta")
    with pytest.raises(DistributedError, match="runtime.device: meta asked, but this process's Accelerate state is on "
                                               "cpu"):
        distributed.make_accelerator(RuntimeConfig(device="auto"))


def test_a_launched_process_keeps_its_accelerate_state(monkeypatch, fresh_accelerate_state):
    """In a launched process the state holds the process group: it is never forgotten."""
    from accelerate.state import PartialState

    from ptyacc.reconstruction import distributed

    PartialState(cpu=True)
    PartialState._shared_state["device"] = torch.device("meta")
    monkeypatch.setenv("WORLD_SIZE", "2")
    distributed._forget_other_device("cpu")
    assert PartialState._shared_state["device"] == torch.device("meta")
    monkeypatch.setenv("WORLD_SIZE", "1")
    distributed._forget_other_device("cpu")
    assert PartialState._shared_state == {}


@pytest.mark.parametrize(("device", "backend", "expected"), [
    ("cuda:0", "gloo", {}), ("cuda:0", "nccl", {"device_ids": [0]}), ("cuda:3", "nccl", {"device_ids": [3]}),
    ("cpu", "gloo", {})])
def test_the_closing_barrier_names_the_gpu_the_process_is_on(monkeypatch, device, backend, expected):
    """Seen on an H200 shared by two processes: Accelerate's wait_for_everyone named GPU 1 (the local rank) and
    failed after the last iteration. ptyacc's barrier names the process's own GPU under NCCL and none under gloo."""
    from types import SimpleNamespace

    from ptyacc.reconstruction import distributed

    calls = []
    monkeypatch.setattr(distributed.torch.distributed, "barrier", lambda **kw: calls.append(kw))
    monkeypatch.setattr(distributed.torch.distributed, "get_backend", lambda: backend)
    distributed.wait_for_everyone(SimpleNamespace(num_processes=2, device=torch.device(device)))
    distributed.wait_for_everyone(SimpleNamespace(num_processes=1, device=torch.device(device)))  # alone: no barrier
    assert calls == [expected]


def test_a_failed_launch_is_told_by_its_error_not_the_launchers_summary():
    """The launcher's closing summary (rows of '=', ChildFailedError) follows the rank's own error."""
    stderr = """[rank1]: Traceback (most recent call last):
[rank1]:   File "x.py", line 1, in <module>
[rank1]: IndexError: list index out of range
ptyacc: error: lost contact with the other processes in iteration 0
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
ptyacc.run FAILED
============================================================"""
    assert selftest.error_line(stderr) == "[rank1]: IndexError: list index out of range"
    assert selftest.error_line("one line\n") == "one line" and selftest.error_line("") == "(no output)"
    refused = """ptyacc: error: optim.batch_size: must be >= 1, got 0
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================"""
    assert selftest.error_line(refused) == "ptyacc: error: optim.batch_size: must be >= 1, got 0"


def test_the_chosen_device_reaches_the_tests_that_take_one(monkeypatch, tmp_path):
    import conftest

    if conftest.test_device() == "cpu":  # unset: the CPU, GPUs hidden
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("PTYACC_TEST_DEVICE", "cpu")
    assert conftest.tiny_config(tmp_path)["runtime"] == {"progress": False, "seed": 3}  # unchanged on the CPU
    assert conftest.launch_environment()["ACCELERATE_USE_CPU"] == "1"
    monkeypatch.setenv("PTYACC_TEST_DEVICE", "cuda")
    assert conftest.tiny_config(tmp_path)["runtime"] == {"progress": False, "seed": 3, "device": "cuda",
                                                         "backend": "gloo"}  # two launched ranks share one GPU
    assert "ACCELERATE_USE_CPU" not in conftest.launch_environment()


def test_what_cannot_run_on_the_chosen_device_is_skipped_with_why(tmp_path):
    node = next(iter(conftest_cpu_only()))  # a parametrized test: its 3 cases
    env = {k: v for k, v in os.environ.items() if k != "PTYACC_TEST_DEVICE"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--device", "mps",
                           node], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "3 skipped" in done.stdout and "CPU only: its expected lines name the cpu device" in done.stdout, done.stdout


def conftest_cpu_only() -> dict:
    import conftest

    return conftest.CPU_ONLY


def _flag_on_rank_one(rank: int, store_file: str, results: str) -> None:
    import torch.distributed as dist

    from ptyacc.reconstruction.exchange import on_any_process, timed_all_reduce

    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2)
    seen = on_any_process(torch.tensor(rank == 1), 2)
    summed = torch.ones(3)
    wait = timed_all_reduce(summed)  # on a CPU: seconds from the host's clock
    Path(results, f"rank{rank}.json").write_text(json.dumps([seen, summed.tolist(), wait]))
    dist.destroy_process_group()


@pytest.mark.processes
def test_a_stop_on_one_process_stops_every_process(tmp_path):
    """A window check that fails on one process (runtime.shard_object) is agreed by all: each raises
    the same error instead of the others waiting in the next collective."""
    torch.multiprocessing.spawn(_flag_on_rank_one, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2)
    for rank in (0, 1):
        seen, summed, wait = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen is True and summed == [2.0, 2.0, 2.0] and 0 <= wait < 60
    from ptyacc.reconstruction.exchange import on_any_process

    assert on_any_process(torch.tensor(False), 1) is False and on_any_process(torch.tensor(True), 1) is True
