"""Writing files safely: one run per output folder, and writes that fail with one clear line.

- ``hold_output_dir``: a lock file ``<folder>/.ptyacc.lock`` holding the pid, host, start time
  and command of the run that uses the folder. A second run is refused while the first is alive;
  a lock whose process has ended (same host, pid gone or reused) is stale and replaced. A lock
  from another host cannot be checked by pid: the message says so and names the file to delete.
  The lock is created with a hard link (atomic on NFS and other shared file systems), held by
  the main process only, and removed at exit, also after an error.
- ``atomic_write``: write to a temporary file beside the target, rename it when complete; on
  any error the temporary file is removed, and an OSError (also one that torch, h5py or Pillow
  wrapped in an error of their own) becomes an ``OutputError`` naming the file, the free space
  and the space needed.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import errno
import json
import os
import re
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from ptyacc.errors import ConfigError, OutputError, PtyaccError

LOCK_NAME = ".ptyacc.lock"
TEMPORARY = re.compile(r"^\..+\.tmp(\d+)$")  # atomic_write's temporary files: .<name>.tmp<pid>
SPACE_ERRORS = {errno.ENOSPC: "no space left on device", getattr(errno, "EDQUOT", -1): "disk quota exceeded"}
_HELD: dict[str, OutputLock] = {}  # token -> lock, the locks this process holds


# --- the lock -------------------------------------------------------------------------------------

class OutputLock:
    """The lock of one output folder; ``acquire`` raises OutputError when another run holds it.
    ``setting``: how the user names the folder (``output.dir``, ``--output-dir``), for messages."""

    def __init__(self, folder: Path, setting: str = "output.dir") -> None:
        self.folder, self.setting = Path(folder), setting
        self.path = self.folder / LOCK_NAME
        self.token = uuid.uuid4().hex

    def acquire(self) -> None:
        if self.folder.exists() and not self.folder.is_dir():
            raise ConfigError(f"{self.setting}: {self.folder} is a file, not a folder")
        with writing(self.folder, advice=f"choose another {self.setting}"):
            self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            if self._create():
                _HELD[self.token] = self
                _remove_leftovers(self.folder)
                return
            owner = _read_owner(self.path)
            if owner is None:  # removed in the meantime: try again
                continue
            alive = _owner_alive(owner)
            if alive is None and "pid" in owner:
                raise OutputError(f"{self.setting}: {self.folder} is in use by a ptyacc run on host {owner.get('host')} "
                                  f"(pid {owner['pid']}, started {owner.get('started')}), which cannot be checked from "
                                  f"{socket.gethostname()}; if that run has ended, delete {self.path} and start again, "
                                  f"or choose another {self.setting}")
            if alive is None:
                raise OutputError(f"{self.setting}: {self.folder} holds a lock file that names no run ({self.path}); if "
                                  "no other ptyacc run uses this folder, delete it and start again")
            if alive:
                raise OutputError(f"{self.setting}: {self.folder} is in use by another ptyacc run (pid {owner['pid']} on "
                                  f"{owner.get('host')}, started {owner.get('started')}: {owner.get('command', '')[:120]}"
                                  f"); wait for it to end or choose another {self.setting}")
            self._remove_stale(owner)
            print(f"ptyacc: {self.setting}: {self.folder} was locked by a run that has ended (pid {owner['pid']}, "
                  f"started {owner.get('started')}); lock removed", file=sys.stderr)
        raise OutputError(f"{self.setting}: could not lock {self.folder}: other runs keep starting in it")

    def release(self) -> None:
        """Remove the lock file if it is still this lock's (never another run's)."""
        if _HELD.pop(self.token, None) is None:
            return
        owner = _read_owner(self.path)
        if owner is not None and owner.get("token") == self.token:
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _create(self) -> bool:
        """Create the lock file complete and atomically; False if one exists."""
        text = json.dumps(_owner_record(self.token))
        tmp = self.folder / f"{LOCK_NAME}.{self.token}"
        try:
            with writing(self.path, advice=f"choose another {self.setting}"):
                tmp.write_text(text)
                try:
                    os.link(tmp, self.path)
                except FileExistsError:
                    pass
                except OSError as exc:  # a file system without hard links
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                        raise
                    return self._create_exclusive(text)
                # st_nlink, not link()'s answer: over NFS a link can succeed and still report EEXIST
                return os.stat(tmp).st_nlink == 2
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _create_exclusive(self, text: str) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return True

    def _remove_stale(self, owner: dict) -> None:
        """Remove the stale lock ``owner`` without removing a live one that replaced it meanwhile."""
        aside = self.folder / f"{LOCK_NAME}.stale.{self.token}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        moved = _read_owner(aside)
        if moved is not None and moved.get("token") != owner.get("token"):  # another run's fresh lock: put it back
            with contextlib.suppress(OSError):
                os.link(aside, self.path)
        with contextlib.suppress(OSError):
            aside.unlink()


@contextlib.contextmanager
def hold_output_dir(folder: Path, main: bool | None = None, setting: str = "output.dir") -> Iterator[OutputLock | None]:
    """Hold the lock of ``folder`` for the block, on the main process only (``main`` None: found
    from torch.distributed or the launcher's rank variables); other processes do not touch it."""
    if not (is_main_process() if main is None else main):
        yield None
        return
    lock = OutputLock(folder, setting)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


def is_main_process() -> bool:
    """Global rank 0, before or after the process group is set up (the launchers' variables)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value) == 0
    return True


def _owner_record(token: str) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "process_start": _process_start(os.getpid()),
            "started": datetime.datetime.now().isoformat(timespec="seconds"), "command": " ".join(sys.argv),
            "token": token}


def _read_owner(path: Path) -> dict | None:
    """The lock's record; None if there is no lock; {} if it names no run."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else {}


def _owner_alive(owner: dict) -> bool | None:
    """True: the run is alive; False: it has ended; None: cannot tell (another host, no record)."""
    if "pid" not in owner or owner.get("host") != socket.gethostname():
        return None
    pid = owner["pid"]
    if pid == os.getpid():
        return owner.get("token") in _HELD
    if not _pid_alive(pid):
        return False
    started = owner.get("process_start")
    return started is None or _process_start(pid) in (None, started)  # a different start time: pid reused


def _pid_alive(pid: int) -> bool:
    if sys.platform == "win32":  # os.kill(pid, 0) would send CTRL_C_EVENT there
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return kernel32.GetLastError() == 5  # access denied: it exists
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        kernel32.CloseHandle(handle)
        return code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a killed process stays a zombie until its parent reaps it (a killed launcher's workers wait
    # for init, and a container's first process may never reap them): it holds nothing
    return _proc_stat_field(pid, 0) != "Z"


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks after boot (Linux), to tell a reused pid apart."""
    return _proc_stat_field(pid, 19)


def _proc_stat_field(pid: int, index: int) -> str | None:
    """Field ``index`` after the command name of /proc/<pid>/stat (0: the state, 19: the start
    time); None where there is no /proc (macOS) or the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[index] if len(fields) > index else None


def _remove_leftovers(folder: Path) -> None:
    """Remove the temporary files of writes that a killed run left (their pid has ended)."""
    for place in (folder, folder / "checkpoints"):
        if not place.is_dir():
            continue
        for path in place.iterdir():
            match = TEMPORARY.match(path.name)
            if match and int(match[1]) != os.getpid() and not _pid_alive(int(match[1])):
                with contextlib.suppress(OSError):
                    path.unlink()


@atexit.register
def _release_all() -> None:
    for lock in list(_HELD.values()):
        lock.release()


# --- writes -----------------------------------------------------------------------------------------

def temporary_path(path: Path) -> Path:
    """Where ``atomic_write`` writes ``path`` first: ``.<name>.tmp<pid>`` beside it."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextlib.contextmanager
def atomic_write(path: Path, needed_bytes: int | None = None, advice: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; renamed to ``path`` when the block ends
    without error, removed otherwise. An OSError in the block becomes an OutputError (see
    ``writing``), computed after the temporary file is gone, so the free space it gives is real."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with writing(path, needed_bytes, advice, remove_first=tmp):
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_bytes(path: Path, data: bytes, advice: str | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see ``atomic_write``)."""
    with atomic_write(path, len(data), advice) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: Path, text: str, advice: str | None = None) -> Path:
    return write_bytes(path, text.encode(), advice)


@contextlib.contextmanager
def writing(path: Path, needed_bytes: int | None = None, advice: str | None = None,
            remove_first: Path | None = None) -> Iterator[None]:
    """Run a block that writes ``path``: an OSError raised in it, directly or as the cause or
    context of another error (torch reports a full disk as 'unexpected pos'), becomes an
    OutputError with the file, the reason, the free space and ``needed_bytes``. ``remove_first``
    (a partial file) is removed before the free space is measured."""
    try:
        yield
    except PtyaccError:  # already one clear line (a DataError that came from a read, say)
        raise
    except Exception as exc:
        cause = _os_error_in(exc)
        if cause is None:
            raise
        if remove_first is not None:
            with contextlib.suppress(OSError):
                remove_first.unlink()
        raise OutputError(write_failure(Path(path), cause, needed_bytes, advice)) from None


def write_failure(path: Path, error: OSError, needed_bytes: int | None = None, advice: str | None = None) -> str:
    """One line: what was not written, why, and for a full disk the free and the needed space."""
    advice = advice or "free space or write elsewhere"
    code = error.errno if error.errno is not None else _errno_in_text(str(error))
    if code in SPACE_ERRORS:
        folder = _existing_folder(path)
        try:
            space = f"{format_bytes(shutil.disk_usage(folder).free)} free in {folder}"
        except OSError:
            space = f"free space in {folder} unknown"
        if needed_bytes:
            space += f", about {format_bytes(needed_bytes)} needed"
        return f"{path}: not written, {SPACE_ERRORS[code]} ({space}); {advice}"
    reason = error.strerror or str(error).splitlines()[0][:200]
    return f"{path}: not written ({reason}); {advice}"


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def _os_error_in(exc: BaseException) -> OSError | None:
    """``exc`` if an OSError, else the OSError it was raised from or while handling, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def _errno_in_text(text: str) -> int | None:
    """HDF5 and others sometimes give the errno only in their message."""
    if "No space left on device" in text:
        return errno.ENOSPC
    if "quota exceeded" in text.lower():
        return errno.EDQUOT
    return None


def _existing_folder(path: Path) -> Path:
    folder = path.parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder
