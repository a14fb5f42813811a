"""run.log in the output folder: config, versions, processes and devices, one line per
iteration, the end summary. The lines go through Accelerate's logger (``accelerate.logging``,
named ``ptyacc``: main process only, and any handler a user adds sees them); run.log is a file
handler of that logger. Other processes contribute their device line. A line that cannot be
written (a full disk) ends the log with one warning; the run goes on."""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

from ptyacc.results.outdir import write_failure
from ptyacc.version import IMPORTED_AT

LOGGER_NAME = "ptyacc"
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"  # run.log's time stamp, to the second
# the data's check lines that reach the terminal too: a check that could not run, a warning, an auto the data
# could not resolve, positions read otherwise than the config says
TERMINAL = ("calibration check skipped", "warning", "auto not applied", "positions:")
RANK_TAG = re.compile(r"(?<= )\[RANK \d+\] ")  # after the time stamp


class RunLogFile(logging.Handler):
    """run.log: appends each record as ``<time stamp> <message>``, opening the file for each
    line (so another process reading it sees every line at once). A line that cannot be written
    prints one warning on the terminal and ends this handler: the log is a record, the run goes on."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        self.path: Path | None = path
        self.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt=STAMP_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if self.path is None:
            return
        # Accelerate's adapter tags each message "[RANK 0] "; only the main process writes run.log
        text = RANK_TAG.sub("", self.format(record), count=1)
        try:
            with open(self.path, "a") as f:
                f.write(text + "\n")
        except OSError as exc:
            print(f"ptyacc: warning: {write_failure(self.path, exc, advice='run.log ends here, the run goes on')}",
                  file=sys.stderr)
            self.path = None


def ptyacc_logger():
    """ptyacc's logger: Accelerate's adapter (main process only unless told otherwise) around
    the ``ptyacc`` logger, which passes INFO lines whatever ACCELERATE_LOG_LEVEL says: run.log
    must hold them."""
    from accelerate.logging import get_logger

    adapter = get_logger(LOGGER_NAME)
    adapter.logger.setLevel(logging.INFO)
    return adapter


def data_lines(data, object_shape: tuple[int, int]) -> list[tuple[str, bool]]:
    """What run.log says of the dataset ``data`` (a ``PtychoData``) and the object of
    ``object_shape`` px built for it, as ``RunLog.say`` takes them: the config values that replace
    the file's, and a calibration check that could not run, also on the terminal."""
    lines = [(f"data: {data.source}, {data.n_patterns} positions, patterns {data.detector_px}^2, "
              f"dx {data.dx_A:.4g} A, object {object_shape[0]} x {object_shape[1]} px", False)]
    lines += [(f"override: {text}", True) for text in data.overrides]
    lines.append(("calibration: " + ", ".join(f"{k} {v:.6g} ({w})" for k, (v, w) in data.calibration.items()), False))
    return lines + [(text, text.startswith(TERMINAL)) for text in data.checks]


class RunLog:
    """ptyacc's messages of one run, into ``path`` (run.log) through ptyacc's logger; with
    ``path`` None (other processes, or no output) the lines reach only the handlers a user added,
    and it takes part in the collective that gathers the device of every process. ``close``
    detaches run.log from the logger at the end of the run."""

    def __init__(self, path: Path | None, append: bool = False, terminal: bool = False, silent: bool = False) -> None:
        """A new log replaces an old one, unless ``append`` (a resumed run continues its log).
        ``terminal``: what ``tell`` says reaches the terminal too (the main process). ``silent``: nothing reaches
        ptyacc's logger either (a trial reconstruction inside another run, whose run.log it would fill)."""
        self.logger, self.terminal, self.silent = ptyacc_logger(), terminal, silent
        self.file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not append:
                path.unlink(missing_ok=True)
            self.file = RunLogFile(path)
            self.logger.logger.addHandler(self.file)

    def line(self, text: str) -> None:
        """Log a line (main process)."""
        if not self.silent:
            self.logger.info(text)

    def tell(self, text: str) -> None:
        """A message for the user: in run.log, and on the terminal (``terminal``)."""
        self.line(text)
        if self.terminal:
            print(f"ptyacc: {text}", file=sys.stderr)

    def say(self, lines: list[tuple[str, bool]]) -> None:
        """Each (text, for the user too) in order: ``tell`` when for the user, else ``line``."""
        for text, to_user in lines:
            self.tell(text) if to_user else self.line(text)

    def close(self) -> None:
        """Detach run.log from ptyacc's logger (a later run in this process has its own)."""
        if self.file is not None:
            self.logger.logger.removeHandler(self.file)
            self.file = None

    def header(self, config, accelerator) -> None:
        from ptyacc.results.h5file import versions

        device = accelerator.device
        name = device.type
        if device.type == "cuda":
            import torch

            name = f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
        mine = f"rank {accelerator.process_index}: {name}"
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            devices = gather_object([mine])
        else:
            devices = [mine]
        self.line("ptyacc run: " + " ".join(sys.argv))
        self.line("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
        backend = getattr(accelerator.state, "backend", None) or "none (one process)"
        self.line(f"processes: {accelerator.num_processes}, backend: {backend}")
        for line in devices:
            self.line(f"device {line}")
        for text in ("config:", *("  " + row for row in config.to_yaml().splitlines())):
            self.line(text)


class LogLine:
    """One run.log line per iteration: loss, time, and what the exchange moved; before the first, the
    start-up's seconds; after the last, the run's summary (seconds since ``started``, a
    ``time.perf_counter`` reading)."""

    def __init__(self, log: RunLog, started: float) -> None:
        self.log, self.started, self.first = log, started, True

    def __call__(self, history) -> None:
        """``history``: the run's record so far (``reconstruction.history.History``)."""
        comm = ""
        if history.traffic:
            t = history.traffic[-1]
            split = ", ".join(f"{kind} {count / 2**20:.2f}" for kind, count in t.bytes.items())
            comm = (f", exchanged {t.total_bytes / 2**20:.2f} MiB ({split}) in {t.calls} collectives, "
                    f"waiting {t.wait_s:.3f} s ({t.wait_s / max(history.seconds[-1], 1e-12):.0%})")
        valid = f", validation error {history.validation[-1]:.6g}" if history.validation else ""
        lines = [f"iteration {history.done}/{history.iterations}: loss {history.loss[-1]:.6g}{valid}, "
                 f"{history.seconds[-1]:.3f} s{comm}"]
        if self.first:  # this launch's first iteration: what came before it
            self.first, began = False, time.perf_counter() - history.seconds[-1]
            lines.insert(0, f"start-up: the first iteration began {began - IMPORTED_AT:.2f} s after `import ptyacc` "
                            f"began ({self.started - IMPORTED_AT:.2f} s to the run's start: imports, the config; "
                            f"{began - self.started:.2f} s reading the data and building the run)")
        if history.done == history.iterations:
            lines += self._summary(history)
        for line in lines:
            self.log.line(line)

    def _summary(self, history) -> list[str]:
        wall = time.perf_counter() - self.started
        lines = [f"done: {history.done} iterations in {wall:.1f} s, final loss {history.loss[-1]:.6g}"]
        traffic = history.traffic or []
        if traffic:
            per_iteration = sum(t.total_bytes for t in traffic) / len(traffic) / 2**20
            waiting = sum(t.wait_s for t in traffic) / sum(history.seconds[-len(traffic):])
            lines.append(f"communication: {per_iteration:.2f} MiB exchanged per iteration, {waiting:.0%} of the "
                         "iteration time spent waiting")
        return lines
