"""`ptyacc selftest`: what this machine can run, checked one line at a time.

It finds the devices (CUDA GPUs with their MIG slices, Apple's MPS, the CPU), the backend a
multi-process run would take and the torch/CUDA build; then runs a small simulated
reconstruction on each device and on the CPU and compares them, the streamed data modes
(``data.hold: host`` and ``disk``) against ``device``, one timed iteration against the FFT bound
(``ptyacc bench``), ``runtime.compile`` against eager, and, with two or more GPUs, two processes
against one. Each check ends ok, failed (why) or skipped (why).

Agreement between devices (``AGREEMENT_RTOL``): ptyacc on one device repeats itself bit for bit
on the CPU; across devices the FFT libraries (cuFFT against pocketfft/MKL) and the order of
float32 sums (CUDA's ``index_add_`` accumulates with atomics) differ at float32 rounding,
about 1e-7 relative per operation, and each iteration's steps carry those differences on. On the
CPU, patterns changed by 1e-7 relative (float32 rounding) move this check's parameters by
6e-7 relative after its 4 iterations (docs/how-to/multi-gpu.md, 'ptyacc selftest'): 1e-3 leaves
three orders of magnitude of room for rounding and still fails a device that computes
something else (a wrong kernel, a lost imaginary part, a dropped pattern move the result by
1e-2 and more). The problem starts from the soft-edged probe: ``probe_aperture_edge: auto``
reads the edge from the mean pattern, and there a change at float32 rounding can move the
initial probe by 6e-4 relative.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ptyacc.config import load_config
from ptyacc.reconstruction.engine import reconstruct
from ptyacc.results.outdir import write_text
from ptyacc.speed.speedtest import error_line

AGREEMENT_RTOL = 1e-3  # relative L2 difference of every parameter between two runs that should agree (see above)
CHECK_ITERATIONS = 4


@dataclass
class Check:
    """One line of the report: ``status`` is ok, failed or skipped; ``detail`` says what was seen or why."""

    name: str
    status: str
    detail: str
    figures: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.name:<20} {self.status}: {self.detail}"


class Skip(Exception):
    """A check that cannot run here; its message is the reason."""


class Mismatch(Exception):
    """A check whose result differs from its reference; its message says by how much."""


# ----------------------------------------------------------------------------- what is here


def find_devices() -> dict:
    """The CUDA GPUs (name, memory, compute capability, MIG or not), whether Apple's MPS is
    there, the CPU and its threads."""
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": props.name, "memory_bytes": props.total_memory,
                         "capability": f"{props.major}.{props.minor}", "mig": "MIG" in props.name})
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return {"cuda": gpus, "mps": mps, "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads()}


def build_figures() -> dict:
    """The torch build: its version, the CUDA and cuDNN it was built with, NCCL's version."""
    nccl = None
    if torch.cuda.is_available() and torch.distributed.is_available() and torch.distributed.is_nccl_available():
        with contextlib.suppress(Exception):
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
    import accelerate

    return {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "nccl": nccl, "accelerate": accelerate.__version__, "python": sys.version.split()[0]}


def best_device(devices: dict) -> str:
    """The device a run with ``runtime.device: auto`` takes."""
    return "cuda" if devices["cuda"] else ("mps" if devices["mps"] else "cpu")


# ----------------------------------------------------------------------------- the small problem


def problem_config(folder: Path, device: str, **runtime) -> dict:
    """A small simulated reconstruction (8 x 8 scan, 32 px patterns, 2 slices), read from a file
    so that every run and every ``data.hold`` sees the same patterns."""
    return {"data": {"path": str(folder / "selftest_data.h5")},
            "model": {"slices": 2, "slice_thickness_A": 2.0, "probe_aperture_edge": "soft"},
            "optim": {"iterations": CHECK_ITERATIONS, "batch_size": 16},
            "output": {"dir": str(folder / f"run_{device}"), "figures": False},
            "runtime": {"device": device, "progress": False, "seed": 5, **runtime}}


def write_problem(folder: Path) -> Path:
    """Simulate the problem's data (on the CPU) into ``folder``/selftest_data.h5."""
    from ptyacc.config import load_config
    from ptyacc.data import load_data
    from ptyacc.data.export import write_dataset

    path = folder / "selftest_data.h5"
    simulated = {"data": {"simulate": {"scan_shape": [8, 8], "detector_px": 32, "atoms": 10}},
                 "model": {"slices": 2, "slice_thickness_A": 2.0, "probe_aperture_edge": "soft"},
                 "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 40.0, "scan_step_A": 0.8,
                                "dx_A": 0.25}}
    write_dataset(path, load_data(load_config(simulated)))
    return path


# one step of the problem: a batch of all 64 positions, one slice (``reconstruct_problem``'s ``changes``)
FIRST_STEP = {"optim": {"iterations": 1, "batch_size": 64}, "model": {"slices": 1}}


def reconstruct_problem(folder: Path, device: str, hold: str = "device", changes: dict | None = None, **runtime):
    """The problem in ``folder`` reconstructed on ``device``, its patterns held as ``hold``, quietly and without
    writing: the ``Reconstruction``. ``changes``: {section: {key: value}} set over the problem's config
    (``FIRST_STEP``)."""
    raw = problem_config(folder, device, **runtime)
    for section, values in (changes or {}).items():
        raw.setdefault(section, {}).update(values)
    config = load_config(raw)
    config.data.hold = hold
    with quietly():
        return reconstruct(config, write=False)


def run_problem(folder: Path, device: str, hold: str = "device", **runtime) -> dict[str, np.ndarray]:
    """Reconstruct the problem on ``device`` with the patterns held as ``hold``: every parameter
    (float64 NumPy), the loss history, and why torch.compile failed (None: it did not, or was not asked)."""
    rec = reconstruct_problem(folder, device, hold, **runtime)
    state = {short_name(name): p.detach().to("cpu", torch.float64).numpy() for name, p in rec.model.named_parameters()}
    state["loss"] = np.asarray(rec.loss)
    state["compile_failure"] = getattr(rec.model.loss_terms, "failure", None)
    return state


# the report names a parameter by its quantity: the object's and the probe's by the quantity alone
SHORT_NAMES = {"quantities.object.transmission": "object", "quantities.probe.modes": "probe"}


def short_name(name: str) -> str:
    """A parameter's name as the report says it (``quantities.positions.offsets_px`` -> ``positions.offsets_px``)."""
    return SHORT_NAMES.get(name, name.removeprefix("quantities."))


def quietly():
    """The runs' own lines (run.log's, on stderr) kept from burying the report's."""
    return contextlib.redirect_stderr(io.StringIO())


def difference(a: dict, b: dict) -> tuple[float, str]:
    """The largest relative L2 difference over the parameters and the loss history, and its name."""
    worst, where = 0.0, ""
    for name, value in a.items():
        if not isinstance(value, np.ndarray):
            continue
        scale = max(float(np.linalg.norm(b[name])), 1e-30)
        rel = float(np.linalg.norm(value - b[name])) / scale
        if rel > worst or not where:
            worst, where = rel, name
    return worst, where


def agree(a: dict, b: dict, what: str) -> dict:
    """Figures of the comparison; ``Mismatch`` beyond ``AGREEMENT_RTOL``."""
    rel, where = difference(a, b)
    if not np.isfinite(rel) or rel > AGREEMENT_RTOL:
        raise Mismatch(f"{what}: {where} differs by {rel:.2e} relative (tolerance {AGREEMENT_RTOL:g})")
    identical = all(np.array_equal(v, b[k]) for k, v in a.items() if isinstance(v, np.ndarray))
    return {"relative_difference": rel, "largest_in": where, "bit_identical": identical}


def said(figures: dict) -> str:
    if figures["bit_identical"]:
        return "bit for bit"
    return f"within {figures['relative_difference']:.1e} relative ({figures['largest_in']}; tolerance {AGREEMENT_RTOL:g})"


# ----------------------------------------------------------------------------- the checks


class Selftest:
    """The checks in order; each is a method returning (detail, figures), raising Skip or
    Mismatch. ``skip``: names of checks not to run (reported as skipped)."""

    def __init__(self, folder: Path, skip: tuple[str, ...] = ()):
        self.folder, self.skip = folder, set(skip)
        self.devices = find_devices()
        self.device = best_device(self.devices)
        self.runs: dict[str, dict] = {}

    def checks(self) -> list[tuple[str, Callable]]:
        return [("build", self.build), ("devices", self.list_devices), ("mig", self.mig), ("backend", self.backend),
                ("reconstruct cpu", self.on_cpu), ("reconstruct cuda", lambda: self.against_cpu("cuda")),
                ("reconstruct mps", lambda: self.against_cpu("mps")), ("hold host", lambda: self.hold("host")),
                ("hold disk", lambda: self.hold("disk")), ("speed", self.speed), ("syncs", self.syncs),
                ("compile", self.compiled), ("two processes", self.two_processes)]

    def build(self):
        f = build_figures()
        cuda = f"CUDA {f['cuda_build']}, cuDNN {f['cudnn']}" if f["cuda_build"] else "built without CUDA"
        return f"torch {f['torch']} ({cuda}{', NCCL ' + f['nccl'] if f['nccl'] else ''}), accelerate " \
               f"{f['accelerate']}, Python {f['python']}", f

    def list_devices(self):
        d = self.devices
        gpus = "; ".join(f"cuda:{g['index']} {g['name']} {g['memory_bytes'] / 2**30:.0f} GiB (sm {g['capability']})"
                         for g in d["cuda"]) or "no CUDA GPU"
        return f"{gpus}; MPS {'yes' if d['mps'] else 'no'}; CPU {d['cpu']}, {d['threads']} threads; " \
               f"runtime.device: auto takes {self.device}", d

    def mig(self):
        gpus = self.devices["cuda"]
        if not gpus:
            raise Skip("no CUDA GPU")
        slices = [g["index"] for g in gpus if g["mig"]]
        if not slices:
            return f"no MIG slices among {len(gpus)} GPU(s)", {"mig": []}
        return (f"MIG slices {slices}: one process per slice (a multi-process run over slices is refused: NCCL "
                "cannot join them)", {"mig": slices})

    def backend(self):
        from ptyacc.reconstruction.distributed import choose_backend

        chosen = choose_backend("auto", self.device)
        dist = torch.distributed
        available = dist.is_available() and (dist.is_nccl_available() if chosen == "nccl" else dist.is_gloo_available())
        if not available:
            raise Mismatch(f"a multi-process run here would use {chosen}, which this torch build lacks")
        return f"several processes would use {chosen}", {"backend": chosen}

    def on_cpu(self):
        run = self.runs["cpu"] = run_problem(self.folder, "cpu")
        loss = run["loss"]
        if not np.all(np.isfinite(loss)) or not loss[-1] < loss[0]:
            raise Mismatch(f"the loss did not fall over {len(loss)} iterations: {loss.tolist()}")
        return f"loss {loss[0]:.4g} -> {loss[-1]:.4g} in {len(loss)} iterations", {"loss": loss.tolist()}

    def against_cpu(self, device: str):
        if device == "cuda" and not self.devices["cuda"]:
            raise Skip(f"no CUDA GPU (torch {torch.__version__}, "
                       f"{'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU-only build'})")
        if device == "mps" and not self.devices["mps"]:
            raise Skip("no Apple GPU (MPS)")
        if "cpu" not in self.runs:
            raise Skip("the CPU run did not finish")
        run = self.runs[device] = run_problem(self.folder, device)
        figures = agree(run, self.runs["cpu"], f"{device} against the CPU")
        return f"equals the CPU's {said(figures)}", figures

    def reference(self) -> dict:
        """The run on the best device with the patterns held there (the streamed modes' reference)."""
        if self.device not in self.runs:
            self.runs[self.device] = run_problem(self.folder, self.device)
        return self.runs[self.device]

    def hold(self, mode: str):
        run = run_problem(self.folder, self.device, hold=mode)
        figures = agree(run, self.reference(), f"data.hold: {mode} against device on {self.device}")
        return f"on {self.device}, equals data.hold: device {said(figures)}", figures

    def speed(self):
        from ptyacc.speed.bench import run_bench

        config = load_config(problem_config(self.folder, self.device))
        with quietly():
            report = run_bench(config, iterations=3, warmup=2)
        mib = report["peak_memory_bytes"] / 2**20
        return (f"on {self.device}: {report['s_per_iteration'] * 1e3:.1f} ms per iteration, {report['ratio']:.1f} x the "
                f"FFT bound ({report['fft_bound_s'] * 1e3:.2f} ms); peak {mib:.1f} MiB ({report['memory_measure']})"), report

    def syncs(self):
        from ptyacc.speed.syncs import count_steps, cuda_syncs_per_step

        config = lambda: load_config(problem_config(self.folder, self.device))  # noqa: E731 - each run its own
        with quietly():
            counted = count_steps(config())
            driver = cuda_syncs_per_step(config()) if self.device == "cuda" else None
        text = f"{counted['syncs_per_step']} synchronisation(s) per step counted from the calls"
        if driver is not None:
            text += f", {driver['syncs_per_step']} by CUDA's sync debug mode"
        return f"{text}; {counted['operators_per_step']} operators per step", {"counted": counted, "cuda": driver}

    def compiled(self):
        run = run_problem(self.folder, self.device, compile=True)
        if run["compile_failure"]:
            raise Mismatch(f"torch.compile failed on {self.device}: {run['compile_failure']}")
        figures = agree(run, self.reference(), f"runtime.compile against eager on {self.device}")
        return f"on {self.device}, equals eager {said(figures)}", figures

    def two_processes(self):
        gpus = [g for g in self.devices["cuda"] if not g["mig"]]
        if not gpus:
            raise Skip("no whole GPU (the test suite runs two processes on CPUs)")
        # NCCL refuses two ranks on one GPU: there the two share it through gloo
        return two_process_run(self.folder, "cuda", self.reference(), "nccl" if len(gpus) >= 2 else "gloo")

    def run(self, echo: Callable[[str], None] = print) -> list[Check]:
        done = []
        for name, check in self.checks():
            if name in self.skip or name.split()[0] in self.skip:
                result = Check(name, "skipped", "not asked (--skip)")
            else:
                result = _outcome(name, check)
            done.append(result)
            echo(result.line())
        return done


def _outcome(name: str, check: Callable) -> Check:
    try:
        detail, figures = check()
    except Skip as exc:
        return Check(name, "skipped", str(exc))
    except Mismatch as exc:
        return Check(name, "failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check, the others still run
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return Check(name, "failed", f"{type(exc).__name__}: {first}", {"traceback": traceback.format_exc()})
    return Check(name, "ok", detail, _plain(figures))


def two_process_run(folder: Path, device: str, single: dict, backend: str = "auto") -> tuple[str, dict]:
    """Launch the problem on two processes and compare its results.h5 with ``single`` (one process)."""
    import yaml

    from ptyacc.results.h5file import load_results
    from ptyacc.speed.speedtest import launch_command

    out = folder / f"run_{device}_2p"
    config = problem_config(folder, device, backend=backend)
    config["output"]["dir"] = str(out)
    path = folder / f"two_{device}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, OMP_NUM_THREADS="1", **({"ACCELERATE_USE_CPU": "1"} if device == "cpu" else {}))
    env.pop("WORLD_SIZE", None)
    done = subprocess.run(launch_command(path, 2, []), env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise Mismatch(f"the 2-process launch exited {done.returncode}: {error_line(done.stderr)[:300]}")
    results = load_results(out / "results.h5")
    loss = np.asarray(results.loss, dtype=float)
    rel = float(np.abs(loss - single["loss"]).max() / np.abs(single["loss"]).max())
    if not rel <= AGREEMENT_RTOL:
        raise Mismatch(f"2 processes' loss differs from 1 process's by {rel:.2e} relative (tolerance {AGREEMENT_RTOL:g})")
    return (f"2 processes on {device} ({backend}) give 1 process's loss within {rel:.1e} relative",
            {"relative_difference": rel, "backend": backend})


def _plain(value):
    """``value`` with NumPy scalars and arrays as JSON-able Python."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.generic,)):
        return value.item()
    return value


def run_selftest(skip: tuple[str, ...] = (), echo: Callable[[str], None] = print,
                 folder: Path | None = None) -> list[Check]:
    """Every check, in a temporary folder (removed afterwards) unless ``folder`` is given."""
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ptyacc-selftest-")))
        folder.mkdir(parents=True, exist_ok=True)
        write_problem(folder)
        return Selftest(folder, skip).run(echo)


def write_report(checks: list[Check], path: Path) -> None:
    """The whole report as JSON (atomically): one object per check, and the counts."""
    counts = {s: sum(c.status == s for c in checks) for s in ("ok", "failed", "skipped")}
    write_text(path, json.dumps({"checks": [asdict(c) for c in checks], "counts": counts,
                                 "tolerance_relative": AGREEMENT_RTOL}, indent=2))
