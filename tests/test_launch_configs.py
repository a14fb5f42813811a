"""The accelerate configs users make, launched for real.

`accelerate config` (the questionnaire, driven here with scripted answers through accelerate's
own code) and `accelerate config default` write a config file; `accelerate launch
--config_file X -m ptyacc.run` must then start the number of processes that
docs/how-to/multi-gpu.md promises, or ptyacc must refuse in one line. Plus the launch guards on the
environments that accelerate's launchers set, and the shipped configs read by accelerate itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

import ptyacc
from ptyacc.errors import DistributedError
from ptyacc.reconstruction.distributed import _check_lone_process_launch
from ptyacc.speed.speedtest import free_port

ACCELERATE = [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
SHIPPED = Path(__file__).parents[1] / "configs" / "accelerate"
NEEDS_NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")

# The answers of docs/how-to/multi-gpu.md (section "`accelerate config`: the answers that work"),
# keyed by a phrase of each question; every other question is answered with Enter (its default).
CPU_USER_ANSWERS = {"type of machine": "multi-GPU", "How many GPU(s)": "2"}
GPU_USER_ANSWERS = {"type of machine": "multi-GPU", "How many GPU(s)": "4"}
ONE_GPU_ANSWERS = {"type of machine": "No distributed training"}
MULTI_CPU_ANSWERS = {"type of machine": "multi-CPU", "How many processes": "2"}

# What accelerate's simple launcher (used for MULTI_CPU without mpirun, NO and --cpu) sets when
# asked for 2 processes: no WORLD_SIZE, no RANK.
SIMPLE_LAUNCHER_TWO = {"ACCELERATE_USE_CPU": "True", "ACCELERATE_MIXED_PRECISION": "no",
                       "ACCELERATE_DYNAMO_BACKEND": "NO", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                       "OMP_NUM_THREADS": "1"}


def answer_questionnaire(answers: dict[str, str], path: Path, monkeypatch) -> dict:
    """Run `accelerate config --config_file path` with ``answers``; the YAML it wrote."""
    import accelerate.commands.config.cluster as cluster
    import accelerate.commands.config.config as config

    def find(question: str) -> str | None:
        return next((a for phrase, a in answers.items() if phrase.lower() in question.lower()), None)

    def ask_options(question, options=(), convert_value=None, default=0):
        answer = find(question)
        index = default if answer is None else [str(o) for o in options].index(answer)
        return convert_value(index) if convert_value else index

    def ask_field(question, convert_value=None, default=None, error_message=None):
        answer = find(question)
        if answer is None:
            assert default is not None, f"no scripted answer for {question!r}"
            return default
        return convert_value(answer) if convert_value else answer

    for module in (cluster, config):
        monkeypatch.setattr(module, "_ask_options", ask_options)
    monkeypatch.setattr(cluster, "_ask_field", ask_field)
    config.config_command(argparse.Namespace(config_file=str(path)))
    return yaml.safe_load(path.read_text())


def clean_environment(**extra: str) -> dict:
    """This environment without any launcher's or accelerate's variables, one thread."""
    launcher = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in launcher and not k.startswith("ACCELERATE_")}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def launch(accelerate_config: Path, run_config: Path, *options: str) -> subprocess.CompletedProcess:
    command = [*ACCELERATE, "launch", "--config_file", str(accelerate_config), "--main_process_port",
               str(free_port()), *options, "-m", "ptyacc.run", str(run_config), "--quiet"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=clean_environment())


@pytest.fixture
def run_config(tmp_path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path, output={"figures": False})))
    return path


def refusal(done: subprocess.CompletedProcess) -> str:
    """ptyacc's one error line in a launch's stderr (accelerate adds its own traceback after it)."""
    lines = [line for line in done.stderr.splitlines() if line.startswith("ptyacc: error:")]
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-3000:]
    return lines[0]


# ----------------------------------------------------------------------------- unit tests


def test_the_simple_launchers_lone_process_is_refused():
    with pytest.raises(DistributedError, match="started one process where its settings ask for several.*"
                                               "--multi_gpu --num_processes N.*ACCELERATE_USE_CPU=1"):
        _check_lone_process_launch(SIMPLE_LAUNCHER_TWO)


@pytest.mark.parametrize("environment", [
    {},  # python -m ptyacc.run
    {k: v for k, v in SIMPLE_LAUNCHER_TWO.items() if not k.startswith("MASTER_")},  # accelerate, 1 process
    {**SIMPLE_LAUNCHER_TWO, "WORLD_SIZE": "2", "RANK": "0"},  # accelerate's multi-GPU launcher, torchrun
    {**SIMPLE_LAUNCHER_TWO, "PMI_SIZE": "2"},  # accelerate's mpirun (Intel MPI, MPICH)
    {**SIMPLE_LAUNCHER_TWO, "OMPI_COMM_WORLD_SIZE": "2"},  # accelerate's mpirun (Open MPI)
    {"MASTER_ADDR": "node1", "MASTER_PORT": "29500"},  # exported by a batch script, no accelerate
])
def test_launches_that_start_what_they_ask_for_pass(environment):
    _check_lone_process_launch(environment)


@pytest.mark.parametrize("answers, shipped, ignored", [
    (CPU_USER_ANSWERS, "cpu_multi_process.yaml", ()),
    (GPU_USER_ANSWERS, "multi_gpu.yaml", ()),
    (ONE_GPU_ANSWERS, "single_gpu.yaml", ("gpu_ids",)),  # the shipped file names GPU 0, the answer is all
])
def test_questionnaire_answers_give_the_shipped_configs(tmp_path, monkeypatch, answers, shipped, ignored):
    """The answers of docs/how-to/multi-gpu.md give the settings of the shipped accelerate configs."""
    written = answer_questionnaire(answers, tmp_path / "answers.yaml", monkeypatch)
    expected = {k: v for k, v in yaml.safe_load((SHIPPED / shipped).read_text()).items() if k not in ignored}
    assert {k: written[k] for k in expected} == expected


def test_multi_cpu_answers_give_multi_cpu_without_mpirun(tmp_path, monkeypatch):
    """The case ptyacc refuses: what "multi-CPU" and Enter everywhere else writes."""
    multi_cpu = answer_questionnaire(MULTI_CPU_ANSWERS, tmp_path / "multi_cpu.yaml", monkeypatch)
    assert multi_cpu["distributed_type"] == "MULTI_CPU" and multi_cpu["num_processes"] == 2
    assert multi_cpu["use_cpu"] is True and "mpirun_config" not in multi_cpu


def test_shipped_configs_load_in_accelerate():
    """Every key of the shipped configs is one accelerate knows (a typo would fail here)."""
    from accelerate.commands.config.config_args import ClusterConfig

    for path in sorted(SHIPPED.glob("*.yaml")):
        assert ClusterConfig.from_yaml_file(str(path)).mixed_precision == "no", path


# ----------------------------------------------------------------------------- real launches


@pytest.mark.slow
def test_multi_cpu_answers_are_refused_in_one_line(tmp_path, run_config, monkeypatch):
    """MULTI_CPU without mpirun: accelerate starts one process; ptyacc says so and what to do."""
    accelerate_config = tmp_path / "multi_cpu.yaml"
    answer_questionnaire(MULTI_CPU_ANSWERS, accelerate_config, monkeypatch)
    line = refusal(launch(accelerate_config, run_config))
    assert "started one process where its settings ask for several" in line
    assert "--multi_gpu --num_processes N` with ACCELERATE_USE_CPU=1" in line
    assert not (tmp_path / "out" / "results.h5").exists()


@pytest.mark.slow
def test_default_config_runs_one_process_and_refuses_two(tmp_path, run_config):
    """`accelerate config default`: its own answer (one process) runs; adding `--num_processes 2`
    (the simple launcher again) is refused instead of running alone."""
    accelerate_config = tmp_path / "default.yaml"
    subprocess.run([*ACCELERATE, "config", "default", "--config_file", str(accelerate_config)], check=True,
                   capture_output=True, env=clean_environment(), timeout=120)
    if not torch.cuda.is_available():
        assert yaml.safe_load(accelerate_config.read_text())["distributed_type"] == "NO"
        assert "started one process" in refusal(launch(accelerate_config, run_config, "--num_processes", "2"))
    done = launch(accelerate_config, run_config)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ptyacc.load_results(tmp_path / "out" / "results.h5").attrs["world_size"] == 1


@pytest.mark.slow
@NEEDS_NO_GPU
def test_cpu_users_answers_start_two_connected_processes(tmp_path, run_config, monkeypatch):
    """The answers of docs/how-to/multi-gpu.md for a CPU user (multi-GPU, 2) start 2 processes joined by gloo,
    with nothing else set: ptyacc puts them on the CPU because no GPU is visible."""
    accelerate_config = tmp_path / "cpu.yaml"
    answer_questionnaire(CPU_USER_ANSWERS, accelerate_config, monkeypatch)
    done = launch(accelerate_config, run_config)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ptyacc.load_results(tmp_path / "out" / "results.h5").attrs["world_size"] == 2


def test_use_cpu_from_the_launcher_is_followed_on_a_gpu_machine(monkeypatch):
    """ACCELERATE_USE_CPU=1 on a machine with GPUs, 2 processes: accelerate puts them on the CPU
    and accepts only gloo, so ptyacc must ask for the CPU and gloo, not NCCL."""
    import accelerate

    import ptyacc.reconstruction.distributed as dist
    from ptyacc.config import RuntimeConfig

    made = {}

    class FakeAccelerator:  # records what ptyacc asks accelerate for; joins no process group
        num_processes = 2
        device = torch.device("cpu")

        def __init__(self, cpu, mixed_precision, kwargs_handlers):
            made.update(cpu=cpu, handlers=kwargs_handlers)

    monkeypatch.setattr(accelerate, "Accelerator", FakeAccelerator)
    monkeypatch.setattr(dist.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist.platform, "system", lambda: "Linux")
    for name, value in {"ACCELERATE_USE_CPU": "1", "WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    dist.make_accelerator(RuntimeConfig())
    assert made["cpu"] is True and made["handlers"][1].backend == "gloo"
    with pytest.raises(DistributedError, match="runtime.device: cuda, but the launcher forces the CPU"):
        dist.make_accelerator(RuntimeConfig(device="cuda"))
