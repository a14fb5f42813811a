"""`ptyacc tune`: finds a known defocus and slice thickness, writes its reports, continues a
study, shares one study between processes (a killed one's trial fails, the study goes on)."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from test_distributed import environment, launch

import ptyacc
from ptyacc.commands.cli import main
from ptyacc.data import load_data
from ptyacc.data.export import write_dataset
from ptyacc.errors import ConfigError, PtyaccError

optuna = pytest.importorskip("optuna")

from ptyacc.tune import tune  # noqa: E402  (needs optuna)
from ptyacc.tune.processes import TuneProcess, detach_from_launcher  # noqa: E402
from ptyacc.tune.study import require_optuna  # noqa: E402
from ptyacc.tune.trial import trial_config  # noqa: E402

TUNE_WORKER = Path(__file__).with_name("tune_worker.py")
TRUE_DEFOCUS_A, TRUE_THICKNESS_A = 30.0, 15.0
# 80 mrad: a depth of field (wavelength / angle^2, ~7 A) short enough for 15 A slices to matter
EXPERIMENT = {"energy_eV": 80e3, "semiangle_mrad": 80.0, "dx_A": 0.15}


def simulated_file(folder: Path, scan: int) -> Path:
    """Noise-free patterns of a 2-slice object, defocus 30 A, slices 15 A apart."""
    config = ptyacc.load_config({
        "data": {"simulate": {"scan_shape": [scan, scan], "detector_px": 16, "atoms": 8, "seed": 2,
                              "atom_phase_rad": 0.8}},
        "experiment": dict(EXPERIMENT, defocus_A=TRUE_DEFOCUS_A, scan_step_A=0.3),
        "model": {"slices": 2, "slice_thickness_A": TRUE_THICKNESS_A}})
    path = folder / "data.h5"
    write_dataset(path, load_data(config))
    return path


def tune_config(folder: Path, data: Path, **tune_keys) -> Path:
    """A config that starts from defocus 0 and 3 A slices and tunes both; the probe is not
    refined, so that it cannot make up for a wrong defocus."""
    tune_section = {"trials": 40, "iterations": 6, "validation_fraction": 0.1, "seed": 0,
                    "params": {"experiment.defocus_A": {"low": 0, "high": 60},
                               "model.slice_thickness_A": {"low": 2, "high": 40}}}
    config = {"data": {"path": str(data)}, "experiment": dict(EXPERIMENT, defocus_A=0.0),
              "model": {"slices": 2, "slice_thickness_A": 3.0},
              "optim": {"batch_size": 16, "start": {"probe": None}, "lr": {"object": 0.05}},
              "output": {"dir": str(folder / "out"), "figures": False}, "runtime": {"progress": False},
              "tune": {**tune_section, **tune_keys}}
    path = folder / "tune.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def stored_trials(tune_dir: Path) -> list:
    """The study's trials so far, read while a process may still be creating it: none before its
    journal holds the study (the file exists, empty, a moment before)."""
    try:
        return stored_study(tune_dir).trials if (tune_dir / "study.journal").exists() else []
    except KeyError:  # Optuna: the journal does not name the study yet
        return []


def stored_study(tune_dir: Path):
    """The study as the processes left it (its journal)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return optuna.load_study(study_name="ptyacc",
                             storage=JournalStorage(JournalFileBackend(str(tune_dir / "study.journal"))))


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """40 TPE trials of 10 iterations (median pruning) over defocus in [0, 60] A and slice thickness
    in [2, 40] A. (Sampler seeds 0-4 all end within 1 A of the defocus and 4 A of the thickness.)"""
    folder = tmp_path_factory.mktemp("tune")
    path = tune_config(folder, simulated_file(folder, 8), iterations=10)
    config = ptyacc.load_config(path, ["output.figures=true"])
    return path, tune(config, TuneProcess(0, 1)), folder / "out" / "tune"


@pytest.mark.slow
def test_tune_finds_the_true_defocus_and_slice_thickness(searched):
    """Within 2 A of the defocus and 4 A of the thickness (the ranges are 60 and 38 A wide)."""
    _, study, _ = searched
    best = study.best_params
    assert abs(best["experiment.defocus_A"] - TRUE_DEFOCUS_A) < 2.0, best
    assert abs(best["model.slice_thickness_A"] - TRUE_THICKNESS_A) < 4.0, best
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) + states.count(optuna.trial.TrialState.PRUNED) == 40


@pytest.mark.slow
def test_reports_list_every_trial_and_keep_the_best_runs(searched):
    _, study, tune_dir = searched
    rows = list(csv.DictReader((tune_dir / "trials.csv").open()))
    assert [int(r["number"]) for r in rows] == list(range(40))
    assert list(rows[0]) == ["number", "state", "value", "process", "seconds", "params.experiment.defocus_A",
                             "params.model.slice_thickness_A", "error"]
    for row, trial in zip(rows, study.trials):
        assert row["state"] == trial.state.name and row["process"] == "0" and float(row["seconds"]) > 0
        assert float(row["params.experiment.defocus_A"]) == trial.params["experiment.defocus_A"]
    complete = sorted((t for t in study.trials if t.state.name == "COMPLETE"), key=lambda t: t.value)
    assert sorted(p.name for p in (tune_dir / "trials").iterdir()) == sorted(f"{t.number:05d}" for t in complete[:3])
    copy = optuna.load_study(study_name="ptyacc", storage=f"sqlite:///{tune_dir / 'study.db'}")
    assert len(copy.trials) == 40 and copy.best_value == study.best_value
    assert all((tune_dir / name).stat().st_size > 1000 for name in ("history.png", "objective_vs_params.png"))


@pytest.mark.slow
def test_best_yaml_runs_and_reproduces_the_best_validation_error(searched):
    _, study, tune_dir = searched
    assert main(["run", str(tune_dir / "best.yaml"), "--quiet"]) == 0
    best = ptyacc.load_config(tune_dir / "best.yaml")
    assert best.experiment.defocus_A == study.best_params["experiment.defocus_A"]
    with h5py.File(Path(best.output.dir) / "results.h5") as f:
        assert f["validation_error"][-1] == pytest.approx(study.best_value, rel=1e-6)


def test_the_same_command_continues_the_study(tmp_path):
    path = tune_config(tmp_path, simulated_file(tmp_path, 5), trials=3, iterations=2, pruner="none")
    first = [(t.number, t.params, t.value) for t in tune(ptyacc.load_config(path), TuneProcess(0, 1)).trials]
    study = tune(ptyacc.load_config(path, ["tune.trials=5"]), TuneProcess(0, 1))
    assert [(t.number, t.params, t.value) for t in study.trials][:3] == first
    assert [t.number for t in study.trials] == [0, 1, 2, 3, 4]
    assert len(list(csv.DictReader((tmp_path / "out" / "tune" / "trials.csv").open()))) == 5


@pytest.mark.slow
def test_ctrl_c_fails_the_running_trial_keeps_the_others_and_the_command_continues(tmp_path):
    path = tune_config(tmp_path, simulated_file(tmp_path, 6), trials=500, iterations=20, pruner="none")
    # its stderr to a file, not a pipe nobody reads: a pipe fills (64 KiB, about 120 trials' lines)
    # and the worker would hang on writing; the file also shows what it said when the test fails
    with (tmp_path / "worker_stderr.txt").open("w") as stderr:
        worker = subprocess.Popen([sys.executable, "-m", "ptyacc.tune", str(path)], env=environment(),
                                  stderr=stderr, text=True)
    tune_dir = tmp_path / "out" / "tune"
    deadline = time.monotonic() + 120
    while not any(t.state.name == "COMPLETE" for t in stored_trials(tune_dir)):
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.2)
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=60) == 130, (tmp_path / "worker_stderr.txt").read_text()[-3000:]
    rows = list(csv.DictReader((tune_dir / "trials.csv").open()))
    # the trial that was running is failed (unless Ctrl-C came between two trials); none is left running
    assert all(row["state"] == "COMPLETE" for row in rows[:-1]) and len(rows) >= 1
    assert rows[-1]["state"] == "COMPLETE" or (rows[-1]["state"], rows[-1]["error"]) == ("FAIL", "interrupted (Ctrl-C)")
    complete = sum(row["state"] == "COMPLETE" for row in rows)
    study = tune(ptyacc.load_config(path, [f"tune.trials={complete + 1}", "tune.iterations=2"]), TuneProcess(0, 1))
    assert [t.number for t in study.trials] == list(range(len(rows) + 1))
    assert study.trials[-1].state.name == "COMPLETE" and len(study.trials[-1].intermediate_values) == 2


@pytest.mark.parametrize("when", ["between trials", "after the last step"])
def test_ctrl_c_outside_a_trials_iterations_ends_the_study_with_its_journal_whole(tmp_path, monkeypatch, when):
    """Ctrl-C between two trials used to raise inside whatever ran, a journal write included; one
    after a trial's last step had asked (its results being saved) was dropped, and the study ran
    on (the test above then waited in vain). Now the first ends the study after the trial, which
    completes, and the second fails the trial; both exit 130 with the study's trials ended."""
    import ptyacc.tune.study as study_module
    import ptyacc.tune.trial as trial_module
    from ptyacc.reconstruction.interrupt import Interrupt, Interrupted

    path = tune_config(tmp_path, simulated_file(tmp_path, 5), trials=4, iterations=2, pruner="none")
    sent = []
    if when == "between trials":
        run_trial = study_module.run_trial

        def run_then_signal(*args):
            value = run_trial(*args)
            if not sent:
                sent.append(signal.raise_signal(signal.SIGINT))
            return value

        monkeypatch.setattr(study_module, "run_trial", run_then_signal)
    else:
        monkeypatch.setattr(Interrupt, "requested", lambda self, step=0, last=True: 0)  # the steps never see it

        class SignalAfterTheLastStep(trial_module.PrunerReport):
            def __call__(self, history) -> None:
                super().__call__(history)
                if history.done == history.iterations and not sent:
                    sent.append(signal.raise_signal(signal.SIGINT))

        monkeypatch.setattr(trial_module, "PrunerReport", SignalAfterTheLastStep)
    with pytest.raises(Interrupted, match="tune interrupted") as caught:
        tune(ptyacc.load_config(path), TuneProcess(0, 1))
    assert caught.value.exit_code == 130 and sent
    trials = stored_study(tmp_path / "out" / "tune").trials
    assert [t.state.name for t in trials] == (["COMPLETE"] if when == "between trials" else ["FAIL"])
    assert when == "between trials" or trials[0].user_attrs["error"] == "interrupted (Ctrl-C)"


def test_data_read_once_when_no_searched_key_changes_it(tmp_path, monkeypatch):
    """Searching only the learning rate, the process reads the data once; its trials' errors are
    those of fresh runs (best.yaml, read from the file, repeats the best)."""
    import ptyacc.data.store as store

    reads = []
    monkeypatch.setattr(store, "load_data", lambda *args, **kwargs: reads.append(1) or load_data(*args, **kwargs))
    path = tune_config(tmp_path, simulated_file(tmp_path, 5), trials=3, iterations=2, pruner="none",
                       params={"optim.lr.object": {"low": 1e-3, "high": 1e-1, "log": True}})
    study = tune(ptyacc.load_config(path), TuneProcess(0, 1))
    assert len(reads) == 1 and len({t.params["optim.lr.object"] for t in study.trials}) == 3
    assert main(["run", str(tmp_path / "out" / "tune" / "best.yaml"), "--quiet"]) == 0
    with h5py.File(tmp_path / "out" / "tune" / "best" / "results.h5") as f:
        assert f["validation_error"][-1] == pytest.approx(study.best_value, rel=1e-6)


def test_tune_section_errors_name_the_key(tmp_path):
    def check(params: dict, match: str, **tune_keys) -> None:
        with pytest.raises(ConfigError, match=match):
            ptyacc.load_config({"tune": {"params": params, **tune_keys}})

    check({"experiment.defocs_A": {"low": 0, "high": 1}}, r"tune.params.experiment.defocs_A: unknown .*defocus_A")
    check({"optim.lr": {"low": 0, "high": 1}}, "is a section")
    check({"output.dir": {"choices": ["a", "b"]}}, "cannot be tuned")
    check({"runtime.seed": {"choices": [0, 1]}}, "runtime.seed cannot be tuned: it chooses the validation positions")
    check({"optim.grouping": {"low": 0, "high": 1}}, "not a number")
    check({"optim.lr.object": {"low": 0, "high": 1, "log": True}}, "log: a log scale needs low > 0")
    check({"optim.lr.object": {"low": 0.1, "high": 1}}, "sampler: grid needs choices", sampler="grid")
    with pytest.raises(ConfigError, match="tune.params: name at least one"):
        tune(ptyacc.load_config({"output": {"dir": str(tmp_path)}}), TuneProcess(0, 1))


def test_trial_configs_read_the_same_files_from_anywhere(tmp_path):
    """Input paths relative to the config file become absolute in a trial's config (and best.yaml)."""
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "c.yaml"
    path.write_text(yaml.safe_dump({"data": {"path": "../d.h5", "flat_field": "gain.h5"},
                                    "model": {"init_from": "prev/results.h5"},
                                    "experiment": {"positions": {"path": "p.npy", "key": "positions_A"}}}))
    config = trial_config(ptyacc.load_config(path), {"optim.lr.object": 0.02, "experiment.aberrations.C30": 1e4},
                          tmp_path / "run")
    assert config.data.path == str(tmp_path / "d.h5") and config.model.init_from == str(tmp_path / "sub/prev/results.h5")
    assert config.experiment.positions.path == str(tmp_path / "sub" / "p.npy")
    assert config.data.flat_field == str(tmp_path / "sub" / "gain.h5")
    assert config.optim.lr.object == 0.02 and config.experiment.aberrations == {"C30": 1e4}
    assert (config.optim.iterations, config.optim.validation_fraction) == (5, 0.05)  # the tune section's
    assert config.output.dir == str(tmp_path / "run") and not config.output.figures


def test_missing_optuna_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(PtyaccError, match=r"pip install 'ptyacc\[tune\]'"):
        require_optuna()


def test_a_process_leaves_the_launchers_group_and_takes_its_gpu(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    launched = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "MASTER_ADDR": "x", "MASTER_PORT": "1",
                "OTHER": "kept"}
    assert detach_from_launcher(launched) == TuneProcess(3, 4, 1) and chosen == [1]  # 4 processes, 2 GPUs
    assert launched == {"OTHER": "kept"}
    on_cpu = {"RANK": "1", "WORLD_SIZE": "2", "ACCELERATE_USE_CPU": "1"}
    assert detach_from_launcher(on_cpu) == TuneProcess(1, 2, None) and chosen == [1]
    assert detach_from_launcher({}) == TuneProcess(0, 1, None)


def test_two_processes_that_count_at_the_same_moment_ask_no_trial_too_many(tmp_path):
    """Two processes' studies on one journal ask for trials at the same moment, each ask slowed by
    0.2 s: the study ends with its budget of trials, not one more."""
    import threading

    from ptyacc.tune.study import ask_within_budget, open_study

    config = ptyacc.load_config(tune_config(tmp_path, tmp_path / "unread.h5", trials=3))
    studies = [open_study(config, TuneProcess(rank, 2, None), tmp_path) for rank in (0, 1)]
    for study in studies:
        ask = study.ask
        study.ask = lambda ask=ask: (time.sleep(0.2), ask())[1]
    start, asked = threading.Barrier(2), []

    def asking(study):
        start.wait()
        while (trial := ask_within_budget(study, 3, tmp_path)) is not None:
            asked.append(trial.number)

    threads = [threading.Thread(target=asking, args=(study,)) for study in studies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(asked) == [0, 1, 2] and len(studies[0].trials) == 3


@pytest.mark.slow
def test_two_launched_processes_share_one_study(tmp_path):
    """`accelerate launch -m ptyacc.tune` with 2 processes: both run trials at the same time, and
    each trial number is run once."""
    path = tune_config(tmp_path, simulated_file(tmp_path, 12), trials=12, iterations=4, pruner="none")
    launch(["-m", "ptyacc.tune", str(path)], 2)
    trials = stored_study(tmp_path / "out" / "tune").trials
    assert [t.number for t in trials] == list(range(12)) and all(t.state.name == "COMPLETE" for t in trials)
    by_process = {p: [t for t in trials if t.user_attrs["process"] == p] for p in (0, 1)}
    assert all(by_process.values())  # distinct processes both ran trials
    assert any(a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete
               for a in by_process[0] for b in by_process[1])  # at the same time


@pytest.mark.slow
def test_a_killed_process_leaves_a_failed_trial_and_the_other_completes_the_study(tmp_path):
    path = tune_config(tmp_path, simulated_file(tmp_path, 10), trials=10, iterations=4, pruner="none",
                       heartbeat_s=0.5)
    env = dict(environment(), WORLD_SIZE="2")
    workers = [subprocess.Popen([sys.executable, str(TUNE_WORKER), str(path), "--die-rank", "1"],
                                env=dict(env, RANK=str(rank)), stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    deadline = time.monotonic() + 240
    codes = [w.wait(timeout=max(deadline - time.monotonic(), 1)) for w in workers]
    assert codes == [0, -9], [w.stderr.read()[-2000:] for w in workers]
    trials = stored_study(tmp_path / "out" / "tune").trials
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(failed) == 1 and failed[0].user_attrs["process"] == 1 and "heartbeat" in failed[0].user_attrs["error"]
    assert sum(t.state.name == "COMPLETE" for t in trials) == 10
    assert [t.number for t in trials] == list(range(len(trials)))
    assert np.isfinite(stored_study(tmp_path / "out" / "tune").best_value)
    assert os.path.exists(tmp_path / "out" / "tune" / "best.yaml")

