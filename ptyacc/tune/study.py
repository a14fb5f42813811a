"""The study that all tuning processes share, and one process's loop over trials.

The study lives in a journal file (``output.dir/tune/study.journal``) written under a file
lock: Optuna's own advice for several processes on one machine or a shared file system, where
SQLite's locking is not safe. Trial numbers are handed out under that lock, so no trial runs
twice; a process counts the study's trials and asks for a new one under a second lock, so the
study never runs more than ``tune.trials``. A running trial stamps a heartbeat into the study
every ``tune.heartbeat_s``; a trial whose stamps stopped for twice that long (its process died) is
marked FAIL by any other process, and failed trials do not count towards ``tune.trials``: the
study goes on. Running the same command again continues the study; Ctrl-C fails the running trial
and keeps the rest (between trials, or after a trial's last step, it ends the study where its
journal is whole).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import torch

from ptyacc.config import Config
from ptyacc.errors import ConfigError, PtyaccError
from ptyacc.reconstruction.interrupt import Interrupt, Interrupted
from ptyacc.tune.processes import TuneProcess, detach_from_launcher
from ptyacc.tune.space import grid_size, make_pruner, make_sampler, suggest
from ptyacc.tune.trial import LoadedOnce, run_trial, trial_config

WAIT_S = 1.0  # how often the main process looks at the running trials of others when waiting for them


def tune(config: Config, process: TuneProcess | None = None):
    """Run this process's share of the study that ``config.tune`` describes (``process``: found
    from the launcher if None) until it holds its trials, waiting at the end for the others'
    running trials; the main process then writes the reports (``report.py``). Returns the
    ``optuna.Study``."""
    process = process or detach_from_launcher()
    optuna = require_optuna()
    if not config.tune.params:
        raise ConfigError("tune.params: name at least one config key to search, e.g. "
                          "experiment.defocus_A: {low: -200, high: 200}")
    tune_dir = Path(config.output.dir) / "tune"
    tune_dir.mkdir(parents=True, exist_ok=True)
    study = open_study(config, process, tune_dir)
    from ptyacc.tune.report import write_reports

    loaded = LoadedOnce(config)
    # between trials a signal is remembered and acted on where the journal is whole (not inside
    # one of its writes, which it could leave half done); during a trial's iterations the run's
    # own listener takes it over and fails that trial
    stop = Interrupt(None, says="ending the study after the running trial")
    try:
        with stop:
            while True:  # a trial failed while waiting (its process died) is run again
                run_trials(study, config, process, tune_dir, loaded, stop)
                wait_for_running(study, config.tune.heartbeat_s, stop)
                if _count(study, optuna) >= budget(config):
                    break
    except (KeyboardInterrupt, Interrupted) as exc:  # a second signal stops at once: KeyboardInterrupt
        kept = f"the study so far is in {tune_dir} (the same command continues it)"
        if process.main:
            write_reports(study, config, tune_dir)
            _say(process, f"interrupted; {kept}")
        # exit 130 / 143 as a run would, saying what the study kept
        signum = exc.exit_code - 128 if isinstance(exc, Interrupted) else signal.SIGINT
        raise Interrupted(f"tune interrupted; {kept}", signum) from None
    if process.main:
        write_reports(study, config, tune_dir)
        _say(process, f"study done: {_progress(study, config)}; reports in {tune_dir}")
    return study


def require_optuna():
    """The optuna module, or a message naming the extra that installs it."""
    try:
        import optuna
    except ImportError:
        raise PtyaccError("ptyacc tune needs Optuna: pip install 'ptyacc[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # ptyacc prints its own line per trial
    return optuna


def open_study(config: Config, process: TuneProcess, tune_dir: Path):
    """The study in ``tune_dir/study.journal``, created by the first process to come."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = str(tune_dir / "study.journal")
    storage = JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
    return optuna.create_study(study_name=config.tune.study_name, storage=storage, direction="minimize",
                               sampler=make_sampler(config.tune, process.rank), pruner=make_pruner(config.tune),
                               load_if_exists=True)


def run_trials(study, config: Config, process: TuneProcess, tune_dir: Path, loaded: LoadedOnce,
               stop: Interrupt | None = None) -> None:
    """Ask for trials and run them until the study holds its ``tune.trials`` (or the grid's size),
    or until ``stop`` has heard a signal (then Interrupted)."""
    while True:
        stopped(stop)
        fail_stale(study, config.tune.heartbeat_s)
        trial = ask_within_budget(study, budget(config), tune_dir)
        if trial is None:
            return
        state, value = run_one(study, trial, config, process, tune_dir, loaded)
        shown = f", validation error {value:.6g}" if value is not None else ""
        _say(process, f"trial {trial.number} {state.name.lower()}{shown} "
                      f"({trial.user_attrs.get('seconds', 0):.1f} s); {_progress(study, config)}")


def ask_within_budget(study, budget: int, tune_dir: Path):
    """A new trial of ``study``, or None when it already holds ``budget`` trials. Counting and asking
    happen under a lock file (``tune_dir/ask.lock``, Optuna's own lock class): two processes that
    counted at the same moment would otherwise both ask, and the study would end with a trial too
    many."""
    import optuna
    from optuna.storages.journal import JournalFileOpenLock

    lock = JournalFileOpenLock(str(tune_dir / "ask"))  # a lock left by a killed process is broken after 30 s
    lock.acquire()
    try:
        return study.ask() if _count(study, optuna) < budget else None
    finally:
        lock.release()


def budget(config: Config) -> int:
    """The trials the study runs: tune.trials, or fewer when a grid has fewer points."""
    return min(config.tune.trials, grid_size(config.tune) or config.tune.trials)


def run_one(study, trial, config: Config, process: TuneProcess, tune_dir: Path, loaded: LoadedOnce) -> tuple:
    """Run ``trial`` and tell the study how it ended: (state, value or None)."""
    import optuna

    State = optuna.trial.TrialState
    run_dir = tune_dir / "trials" / f"{trial.number:05d}"
    started = time.perf_counter()
    state, value, error = State.FAIL, None, None
    try:
        for name, attribute in (("process", process.rank), ("gpu", process.gpu), ("run_dir", str(run_dir))):
            trial.set_user_attr(name, attribute)
        with Heartbeat(study, trial, config.tune.heartbeat_s):
            value = run_trial(trial_config(config, suggest(trial, config.tune), run_dir), trial, loaded)
        state = State.COMPLETE
    except optuna.TrialPruned as exc:
        state, error = State.PRUNED, str(exc)
    except Interrupted as exc:  # SIGINT/SIGTERM during the trial's run, which stopped after its step: so does the study
        _end(study, trial, State.FAIL, None, "interrupted (Ctrl-C)" if exc.exit_code == 128 + signal.SIGINT
             else f"interrupted (signal {exc.exit_code - 128})", started)
        raise
    except (PtyaccError, torch.OutOfMemoryError) as exc:  # this trial's values fail; the study goes on
        error = str(exc).splitlines()[0][:300]
    except BaseException as exc:  # Ctrl-C or a bug: the trial is failed, not left running
        reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        _end(study, trial, State.FAIL, None, reason[:300], started)
        raise
    _end(study, trial, state, value, error, started)
    if error and state == State.FAIL:
        _say(process, f"trial {trial.number} failed: {error}")
    return state, value


def _end(study, trial, state, value: float | None, error: str | None, started: float) -> None:
    trial.set_user_attr("seconds", time.perf_counter() - started)
    if error:
        trial.set_user_attr("error", error)
    study.tell(trial, value if state.name == "COMPLETE" else None, state=state)


class Heartbeat:
    """While the block runs, a thread stamps ``heartbeat`` (Unix time) on the trial every
    ``every_s`` seconds; other processes take a trial without recent stamps for a dead one."""

    def __init__(self, study, trial, every_s: float) -> None:
        self.storage, self.trial_id, self.every_s = study._storage, trial._trial_id, every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="ptyacc-tune-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.storage.set_trial_user_attr(self.trial_id, "heartbeat", time.time())
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def _beat(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.storage.set_trial_user_attr(self.trial_id, "heartbeat", time.time())
            except RuntimeError:  # the trial was ended meanwhile (failed by another process)
                return


def fail_stale(study, heartbeat_s: float) -> list[int]:
    """Mark FAIL the running trials whose heartbeat stopped more than 2 heartbeats ago (their
    process died); their numbers."""
    import optuna

    failed = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        last = trial.user_attrs.get("heartbeat", trial.datetime_start.timestamp())
        if time.time() - last <= 2 * heartbeat_s:
            continue
        try:
            study._storage.set_trial_user_attr(trial._trial_id, "error", "its process stopped (no heartbeat for "
                                               f"{time.time() - last:.0f} s)")
            study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
            failed.append(trial.number)
        except RuntimeError:  # another process failed it first
            continue
    return failed


def wait_for_running(study, heartbeat_s: float, stop: Interrupt | None = None) -> None:
    """Return once no trial is running (others finish theirs, or die and are failed); raise
    Interrupted as soon as ``stop`` has heard a signal."""
    import optuna

    while study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        stopped(stop)
        fail_stale(study, heartbeat_s)
        time.sleep(WAIT_S)


def stopped(stop: Interrupt | None) -> None:
    """Raise Interrupted if ``stop`` heard SIGINT or SIGTERM."""
    if stop is not None and (signum := stop.requested()):
        raise Interrupted(f"{signal.Signals(signum).name} received", signum)


def _count(study, optuna) -> int:
    """Trials that count towards tune.trials: finished, pruned or running."""
    State = optuna.trial.TrialState
    return len(study.get_trials(deepcopy=False, states=(State.COMPLETE, State.PRUNED, State.RUNNING)))


def _progress(study, config: Config) -> str:
    """How far the study is, and its best trial so far."""
    import optuna

    State = optuna.trial.TrialState
    finished = study.get_trials(deepcopy=False, states=(State.COMPLETE, State.PRUNED))
    complete = [t for t in finished if t.state == State.COMPLETE]
    best = min(complete, key=lambda t: t.value) if complete else None
    text = f"{len(finished)} of {config.tune.trials} trials done"
    return text + (f", best validation error {best.value:.6g} (trial {best.number})" if best else "")


def _say(process: TuneProcess, text: str) -> None:
    where = f" [process {process.rank}/{process.world}]" if process.world > 1 else ""
    print(f"ptyacc tune{where}: {text}", file=sys.stderr, flush=True)
