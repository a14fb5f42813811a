"""What happens when the disk fills, and when two runs share an output folder (issue 16).

Every writer answers a failed write with one line (no traceback), removes its temporary file
and leaves what was saved before intact; a figure or a run.log line that does not fit is a
warning and the run goes on. A second run into a folder that a live run uses is refused at
start with exit code 2; a lock left by a killed run is recognised as stale.

A full disk is simulated by writes that raise ENOSPC the way the libraries do (torch wraps it
in 'unexpected pos'); the last tests use a real 600 KiB-sized tmpfs where mounting is allowed.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from conftest import tiny_config

import ptyacc
from ptyacc.commands.cli import main

NO_SPACE = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
SUBPROCESS_TIMEOUT_S = 300


def write_config(folder: Path, **sections) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(folder, **sections)))
    return path


def leftovers(folder: Path) -> list[str]:
    """Temporary and lock files under ``folder``: none may remain after a run ends."""
    return sorted(p.name for p in folder.rglob("*")
                  if (p.name.startswith(".") and ".tmp" in p.name) or ".ptyacc.lock" in p.name or ".partial" in p.name)


def error_line(stderr: str) -> str:
    """The single line of a failure: no traceback, nothing else."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ptyacc: error: "), stderr
    return lines[0]


def fail_writes_of(monkeypatch, name: str) -> None:
    """Path.write_bytes (how ptyacc writes figures, CSVs and JSON) raises ENOSPC for files whose
    name holds ``name``, after writing part of them, as a disk that fills up does."""
    real = Path.write_bytes

    def write_bytes(self, data):
        if name in self.name:
            real(self, data[: len(data) // 2])
            raise NO_SPACE
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)


def fail_hdf5_dataset(monkeypatch, name: str) -> None:
    """h5py raises ENOSPC (as it does, errno 28) when the dataset ``name`` is created."""
    real = h5py.Group.create_dataset

    def create_dataset(self, dataset, *args, **kwargs):
        if dataset == name:
            raise OSError(errno.ENOSPC, "Can't synchronously write data (file write failed: errno = 28, "
                                        "error message = 'No space left on device')")
        return real(self, dataset, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", create_dataset)


# --- a run on a disk that fills up


def test_a_figure_that_does_not_fit_is_one_warning_and_the_run_ends_with_its_results(tmp_path, capsys, monkeypatch):
    config = write_config(tmp_path)
    fail_writes_of(monkeypatch, "summary.png")
    assert main(["run", str(config), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    expected = f"warning: not all figures written (results.h5 is saved): {tmp_path / 'out' / 'summary.png'}: not " \
               "written, no space left on device ("
    assert err.startswith(f"ptyacc: {expected}"), err
    assert "ptyacc plot RESULTS.h5 -o FOLDER" in err
    assert expected in (tmp_path / "out" / "run.log").read_text()
    assert len(ptyacc.load_results(tmp_path / "out" / "results.h5").loss) == 2
    assert (tmp_path / "out" / "loss.png").exists() and not (tmp_path / "out" / "summary.png").exists()
    assert leftovers(tmp_path) == []


def torch_full_disk(real_write, at_iteration: int):
    """A checkpoint writer that fails at ``at_iteration`` the way torch.save does on a full disk:
    part of the file written, then RuntimeError('unexpected pos') raised while handling ENOSPC."""

    def write(path, state):
        if state["iterations_done"] == at_iteration:
            path.write_bytes(b"the first part of a checkpoint")
            try:
                raise NO_SPACE
            except OSError:  # torch raises while handling the write's OSError, not 'from None'
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # noqa: B904
        real_write(path, state)

    return write


@pytest.mark.slow
def test_a_checkpoint_that_does_not_fit_stops_the_run_and_resume_continues(tmp_path, capsys, monkeypatch):
    """Full disk at the 2nd checkpoint: one line with the space needed, the temporary file gone,
    the 1st checkpoint intact; after space is freed, --resume ends as an uninterrupted run."""
    import ptyacc.reconstruction.checkpoint as checkpoint

    config = write_config(tmp_path, optim={"iterations": 6}, output={"checkpoint_every": 2})
    real = checkpoint.write_checkpoint_file
    monkeypatch.setattr(checkpoint, "write_checkpoint_file", torch_full_disk(real, at_iteration=4))
    assert main(["run", str(config), "--quiet"]) == 2
    line = error_line(capsys.readouterr().err)
    folder = tmp_path / "out" / "checkpoints"
    assert line.startswith(f"ptyacc: error: {folder / 'ckpt_000004.pt'}: not written, no space left on device ("), line
    assert f" free in {folder}, about " in line and " KiB needed); " in line
    assert line.endswith("the run stops; ckpt_000002.pt is untouched: free space, then continue with --resume"), line
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt_000002.pt"]
    assert leftovers(tmp_path) == [] and not (tmp_path / "out" / "results.h5").exists()

    monkeypatch.setattr(checkpoint, "write_checkpoint_file", real)  # space freed
    assert main(["run", str(config), "--quiet", "--resume"]) == 0
    resumed = ptyacc.load_results(tmp_path / "out" / "results.h5")
    assert "resumed from" in (tmp_path / "out" / "run.log").read_text()
    assert main(["run", str(config), "--quiet", "--set", f"output.dir={tmp_path / 'whole'}"]) == 0
    whole = ptyacc.load_results(tmp_path / "whole" / "results.h5")
    np.testing.assert_allclose(resumed.loss, whole.loss, rtol=1e-5)


def test_results_that_do_not_fit_stop_the_run_with_one_line(tmp_path, capsys, monkeypatch):
    config = write_config(tmp_path)
    fail_hdf5_dataset(monkeypatch, "loss")
    assert main(["run", str(config), "--quiet"]) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"ptyacc: error: {tmp_path / 'out' / 'results.h5'}: not written, no space left on device ("), line
    assert " needed); the run stops: free space and run again" in line
    assert leftovers(tmp_path) == [] and not (tmp_path / "out" / "results.h5").exists()


def test_run_log_that_cannot_be_written_is_one_warning_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    import builtins

    import ptyacc.results.runlog

    def full_open(path, mode="r", *args, **kwargs):
        if str(path).endswith("run.log") and "a" in mode:
            raise NO_SPACE
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(ptyacc.results.runlog, "open", full_open, raising=False)
    config = write_config(tmp_path)
    assert main(["run", str(config), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"ptyacc: warning: {tmp_path / 'out' / 'run.log'}: not written, no space left on device ("), err
    assert "run.log ends here, the run goes on" in err
    assert len(ptyacc.load_results(tmp_path / "out" / "results.h5").loss) == 2


# --- the other writers


@pytest.fixture(scope="module")
def results_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("done")
    ptyacc.reconstruct(ptyacc.load_config(tiny_config(folder, output={"figures": False})))
    return folder / "out" / "results.h5"


def writer_cases(tmp_path: Path, results_file: Path, pattern_file: Path) -> dict:
    """Each writer: (arguments of `ptyacc`, the file it writes, how its write fails)."""
    config = str(write_config(tmp_path))
    return {
        "plot": (["plot", str(results_file), "-o", str(tmp_path / "figures")], tmp_path / "figures" / "object_phase.png",
                 ("bytes", "object_phase.png")),
        "bench_json": (["bench", config, "-k", "1", "--warmup", "0", "--json", str(tmp_path / "bench.json")],
                       tmp_path / "bench.json", ("bytes", "bench.json")),
        "simulate": (["simulate", config, str(tmp_path / "sim.h5")], tmp_path / "sim.h5", ("hdf5", "patterns")),
        "convert": (["convert", str(pattern_file), str(tmp_path / "converted.h5")], tmp_path / "converted.h5",
                    ("hdf5", "patterns")),
        "config_reference": (["config-reference", "-o", str(tmp_path / "reference.md")], tmp_path / "reference.md",
                             ("bytes", "reference.md")),
    }


@pytest.mark.parametrize("writer", ["plot", "bench_json", "simulate", "convert", "config_reference"])
def test_every_writer_answers_a_full_disk_with_one_line_and_no_partial_file(writer, tmp_path, capsys, monkeypatch,
                                                                            results_file, pattern_file):
    args, target, (how, name) = writer_cases(tmp_path, results_file, pattern_file[0])[writer]
    (fail_writes_of if how == "bytes" else fail_hdf5_dataset)(monkeypatch, name)
    assert main(args) == 2
    captured = capsys.readouterr()
    line = error_line(captured.err)
    assert line.startswith(f"ptyacc: error: {target}: not written, no space left on device (") and " free in " in line
    assert not target.exists() and leftovers(tmp_path) == []


def test_speedtest_tables_hold_plain_numbers_and_a_full_disk_is_one_error(tmp_path, monkeypatch):
    """Issue 14.6: losses read back from results.h5 are NumPy scalars; the CSVs must hold plain
    numbers (np.float64(...) is NumPy 2's repr), every cell readable by float()."""
    from ptyacc.errors import OutputError
    from ptyacc.speed.speedtest import Trial, write_tables

    losses = np.array([1082.8612365722656, 541.91, 300.5])
    trials = [Trial(p, 0, np.float64(2.5), list(losses * p), list(np.array([0.1, 0.1, 0.2]) / p),
                    list(np.array([0, 1024, 2048], np.int64)), list(np.array([0.0, 0.01, 0.02])))
              for p in (1, 2)]
    write_tables(trials, tmp_path)
    with open(tmp_path / "speedtest.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["loss"]) for r in rows] == [*losses.tolist(), *(2 * losses).tolist()]
    with open(tmp_path / "speedtest_summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    for row in [*rows, *summary]:
        for value in row.values():
            float(value)  # a plain number, or this raises
    fail_writes_of(monkeypatch, "speedtest_summary.csv")
    with pytest.raises(OutputError, match=r"speedtest_summary.csv: not written, no space left on device \("):
        write_tables(trials, tmp_path / "again")
    assert leftovers(tmp_path) == []


def test_only_errors_from_a_write_are_translated():
    """An error raised while handling a read failure (a DataError, or any error raised 'from
    None') is not a write failure; torch's 'unexpected pos' raised during ENOSPC is."""
    from ptyacc.errors import DataError, OutputError
    from ptyacc.results.outdir import writing

    for error in (DataError("data.h5: cannot be read"), ValueError("not a write")):
        with pytest.raises(type(error), match=str(error)), writing(Path("out.h5")):
            try:
                raise OSError(errno.EIO, "read failed")
            except OSError:
                raise error from None
    with pytest.raises(OutputError, match=r"out.h5: not written, no space left on device"), writing(Path("out.h5")):
        try:
            raise NO_SPACE
        except OSError:
            raise RuntimeError("unexpected pos 704 vs 598")  # noqa: B904 (as torch does)


# --- the output-folder lock


def lock_record(pid: int, host: str | None = None, **extra) -> str:
    return json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "2026-01-01T00:00:00",
                       "command": "ptyacc run other.yaml", "token": "other", **extra})


def ended_pid() -> int:
    """The pid of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_holds_pid_and_host_refuses_a_second_holder_and_goes_at_release(tmp_path):
    from ptyacc.errors import OutputError
    from ptyacc.results.outdir import LOCK_NAME, hold_output_dir

    folder = tmp_path / "run"
    with hold_output_dir(folder, main=True):
        record = json.loads((folder / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        with pytest.raises(OutputError, match=re.escape(f"output.dir: {folder} is in use by another ptyacc run (pid "
                                                        f"{os.getpid()} on {socket.gethostname()}, started ")), \
                hold_output_dir(folder, main=True):
            pass
        assert (folder / LOCK_NAME).exists()
    assert not (folder / LOCK_NAME).exists()
    with pytest.raises(RuntimeError), hold_output_dir(folder, main=True):  # released after an error too
        raise RuntimeError("boom")
    assert list(folder.iterdir()) == []


def test_only_the_main_process_touches_the_lock(tmp_path, monkeypatch):
    from ptyacc.results.outdir import hold_output_dir, is_main_process

    with hold_output_dir(tmp_path / "run", main=False) as lock:
        assert lock is None and not (tmp_path / "run").exists()
    monkeypatch.setenv("RANK", "1")
    assert not is_main_process()
    monkeypatch.setenv("RANK", "0")
    assert is_main_process()


def test_a_lock_whose_process_has_ended_or_whose_pid_was_reused_is_stale(tmp_path, capsys):
    from ptyacc.results.outdir import LOCK_NAME, hold_output_dir

    folder = tmp_path / "run"
    folder.mkdir()
    for record in (lock_record(ended_pid()), lock_record(os.getppid(), process_start="1")):
        (folder / LOCK_NAME).write_text(record)
        with hold_output_dir(folder, main=True):
            assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()
        assert "was locked by a run that has ended" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told by /proc (Linux)")
def test_a_lock_held_by_a_killed_process_not_yet_reaped_is_stale(tmp_path, capsys):
    """A SIGKILLed run's workers stay zombies until reaped (a killed launcher's children wait for
    init): such a pid still answers kill(pid, 0) but holds nothing, so its lock is stale."""
    from ptyacc.results.outdir import LOCK_NAME, hold_output_dir

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child did not end"
        time.sleep(0.01)
    try:
        os.kill(child.pid, 0)  # still there: a zombie, not reaped yet
        folder = tmp_path / "run"
        folder.mkdir()
        (folder / LOCK_NAME).write_text(lock_record(child.pid))
        with hold_output_dir(folder, main=True):
            assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()
        assert "was locked by a run that has ended" in capsys.readouterr().err
    finally:
        child.wait()


def test_a_lock_from_another_host_is_not_guessed_at(tmp_path):
    from ptyacc.errors import OutputError
    from ptyacc.results.outdir import LOCK_NAME, hold_output_dir

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / LOCK_NAME).write_text(lock_record(ended_pid(), host="node-elsewhere"))
    with pytest.raises(OutputError, match=r"in use by a ptyacc run on host node-elsewhere .* which cannot be checked "
                                          r"from .*; if that run has ended, delete " + re.escape(f"{folder / LOCK_NAME}")), \
            hold_output_dir(folder, main=True):
        pass
    assert json.loads((folder / LOCK_NAME).read_text())["host"] == "node-elsewhere"


def test_release_never_removes_another_runs_lock(tmp_path):
    from ptyacc.results.outdir import LOCK_NAME, hold_output_dir

    folder = tmp_path / "run"
    with hold_output_dir(folder, main=True):
        (folder / LOCK_NAME).write_text(lock_record(os.getppid()))  # removed by hand and taken by another run
    assert json.loads((folder / LOCK_NAME).read_text())["token"] == "other"


def test_temporary_files_of_a_killed_run_are_removed_when_the_folder_is_locked(tmp_path):
    from ptyacc.results.outdir import hold_output_dir

    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    dead, alive = ended_pid(), os.getppid()
    for name in (f"checkpoints/.ckpt_000002.pt.tmp{dead}", f".results.h5.tmp{dead}", f".results.h5.tmp{alive}",
                 "checkpoints/ckpt_000002.pt"):
        (folder / name).write_bytes(b"x")
    with hold_output_dir(folder, main=True):
        pass
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        f".results.h5.tmp{alive}", "checkpoints/ckpt_000002.pt"]


# --- two real processes


HOLD_AT_ITERATION_2 = """
import sys, time
from pathlib import Path
import ptyacc.results.runlog as runlog
real = runlog.RunLog.line
def line(self, text):
    real(self, text)
    if text.startswith("iteration 2/"):   # hold here, lock taken, until the test says go
        while not Path(sys.argv[1]).exists():
            time.sleep(0.05)
runlog.RunLog.line = line
from ptyacc.commands.cli import main
sys.exit(main(["run", *sys.argv[2:]]))
"""


def environment() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    return {**env, "OMP_NUM_THREADS": "1"}


def start_held_run(config: Path, out: Path, go: Path, **pipes) -> subprocess.Popen:
    """`ptyacc run` that stops after iteration 2 (lock held) until the file ``go`` exists."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_AT_ITERATION_2, str(go), str(config), "--quiet", "--set",
                             f"output.dir={out}"], env=environment(), text=True, **pipes)
    end = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while "iteration 2/" not in ((out / "run.log").read_text() if (out / "run.log").exists() else ""):
        assert proc.poll() is None, "the first run ended too early"
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_a_second_run_into_a_folder_in_use_is_refused_and_the_first_is_unaffected(tmp_path):
    config, out, go = write_config(tmp_path, optim={"iterations": 4}), tmp_path / "shared", tmp_path / "go"
    first = start_held_run(config, out, go, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    second = subprocess.run([sys.executable, "-m", "ptyacc.run", str(config), "--set", f"output.dir={out}", "--overwrite"],
                            env=environment(), capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    go.touch()
    _, err = first.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert second.returncode == 2
    line = error_line(second.stderr)
    assert f"output.dir: {out} is in use by another ptyacc run (pid {first.pid} on {socket.gethostname()}" in line
    assert first.returncode == 0, err
    assert len(ptyacc.load_results(out / "results.h5").loss) == 4
    log = (out / "run.log").read_text()
    assert log.count("ptyacc run: ") == 1 and "--overwrite" not in log
    assert leftovers(out) == []


@pytest.mark.slow
def test_a_killed_run_leaves_a_stale_lock_that_the_next_run_replaces(tmp_path):
    from ptyacc.results.outdir import LOCK_NAME

    config, out = write_config(tmp_path, optim={"iterations": 4}), tmp_path / "killed"
    first = start_held_run(config, out, tmp_path / "never", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert json.loads((out / LOCK_NAME).read_text())["pid"] == first.pid
    again = subprocess.run([sys.executable, "-m", "ptyacc.run", str(config), "--quiet", "--set", f"output.dir={out}"],
                           env=environment(), capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert again.returncode == 0, again.stderr
    assert f"was locked by a run that has ended (pid {first.pid}, started " in again.stderr
    assert leftovers(out) == []


# --- a real small file system (tmpfs; needs permission to mount, skipped elsewhere)


@pytest.fixture
def small_disk(tmp_path):
    """mount(size_kib) -> a tmpfs of that size; remount(size_kib) changes it; unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = []

    def mount(size_kib: int, remount: bool = False) -> Path:
        options = f"remount,size={size_kib}k" if remount else f"size={size_kib}k"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()[:100]})")
        mounted.append(disk)
        return disk

    if sys.platform != "linux":
        pytest.skip("tmpfs is Linux")
    yield mount
    if mounted:
        subprocess.run(["umount", str(disk)], check=False)


def pages(size_bytes: int) -> int:
    return -(-size_bytes // 4096)


@pytest.mark.slow
def test_on_a_real_full_disk_checkpoints_and_figures(tmp_path, small_disk, capsys):
    """The issue's two runs on a tmpfs sized from a first run: (1) the 3rd checkpoint does not
    fit: one line, the 2nd intact, --resume after the disk grows; (2) summary.png does not fit:
    one warning, results.h5 and the other figures kept, exit 0."""
    config = write_config(tmp_path, optim={"iterations": 6})
    sizing = tmp_path / "sizing"
    assert main(["run", str(config), "--quiet", "--set", f"output.dir={sizing}", "--set", "output.checkpoint_every=2"]) == 0
    capsys.readouterr()
    size = {p.name: p.stat().st_size for p in sizing.rglob("*") if p.is_file()}
    log_pages = pages(size["run.log"]) + 2  # + the lock and some growth

    checkpoint = pages(size["ckpt_000006.pt"])
    disk = small_disk(4 * (log_pages + 2 * checkpoint + checkpoint // 2))
    out = disk / "checkpointed"
    args = ["run", str(config), "--quiet", "--set", f"output.dir={out}", "--set", "output.checkpoint_every=2"]
    assert main(args) == 2
    line = error_line(capsys.readouterr().err)
    assert "ckpt_000006.pt: not written, no space left on device (" in line
    assert line.endswith("ckpt_000004.pt is untouched: free space, then continue with --resume"), line
    assert leftovers(disk) == [] and sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "ckpt_000002.pt", "ckpt_000004.pt"]
    small_disk(16 * 1024, remount=True)
    assert main([*args, "--resume"]) == 0
    assert len(ptyacc.load_results(out / "results.h5").loss) == 6
    subprocess.run(["rm", "-rf", str(out)], check=True)

    four = sum(pages(size[name]) for name in ("object_phase.png", "probe.png", "loss.png", "positions.png"))
    small_disk(4 * (log_pages + pages(size["results.h5"]) + four + pages(size["summary.png"]) // 2), remount=True)
    out = disk / "figures"
    assert main(["run", str(config), "--quiet", "--set", f"output.dir={out}"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert f"{out / 'summary.png'}: not written, no space left on device (" in err
    assert len(ptyacc.load_results(out / "results.h5").loss) == 6
    assert (out / "positions.png").exists() and leftovers(disk) == []
