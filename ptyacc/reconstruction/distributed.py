"""Everything about processes: the Accelerator, the backend choice, guards against broken
launches, the one unwrap helper, and the parameter checksum that proves ranks agree."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import warnings
from datetime import timedelta

import torch
from torch import nn

from ptyacc.config import OutputConfig, RuntimeConfig
from ptyacc.errors import DistributedError
from ptyacc.reconstruction.exchange import BUCKET_CAP_MB


def unwrap(model: nn.Module) -> nn.Module:
    """The bare model inside a DDP (or compile) wrapper; the model itself otherwise.
    The only place in ptyacc that knows about ``.module``."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return getattr(model, "_orig_mod", model)


def bare_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The torch optimizer inside Accelerate's wrapper, to step and zero directly.

    Accelerate's ``AcceleratedOptimizer`` (1.15) searches the disk for an optional package in
    every ``step`` (``is_lomo_available``: two ``importlib`` look-ups, ~0.2 ms each on this
    project's machine) and reads the inner ``zero_grad``'s signature in every ``zero_grad``
    (~0.1 ms): with two groups about a tenth of a demo step. Without a gradient scaler (ptyacc
    refuses mixed precision), XLA or gradient accumulation both are the inner optimizer's, and
    so are its state dicts: the parameter groups hold the inner optimizer once Accelerate has
    prepared it."""
    inner = getattr(optimizer, "optimizer", None)
    if isinstance(inner, torch.optim.Optimizer) and getattr(optimizer, "scaler", None) is None:
        return inner
    return optimizer


def prepare(accelerator, model: nn.Module, groups: list, batches) -> tuple[nn.Module, object]:
    """``model``, the ``groups``' optimizers and a loader of ``batches`` (one item per step)
    through ``accelerator.prepare``: (the model as prepared, DDP for several processes; the
    loader). Each group then holds its prepared optimizer's inner torch optimizer
    (``bare_optimizer``)."""
    from operator import itemgetter

    from torch.utils.data import DataLoader

    loader = DataLoader(batches, batch_size=1, shuffle=False, collate_fn=itemgetter(0))  # an item is a whole step
    with quiet_ddp_settings():
        wrapped, *optimizers, loader = accelerator.prepare(model, *[g.optimizer for g in groups], loader)
    for group, optimizer in zip(groups, optimizers, strict=True):
        group.optimizer = bare_optimizer(optimizer)  # stepped without the wrapper's per-call costs
    return wrapped, loader


@contextlib.contextmanager
def quiet_ddp_settings():
    """Wrapping a model in DDP with ptyacc's settings (``kwargs_handlers``) without torch's
    warning that ``broadcast_buffers=False`` is deprecated: the option torch would have instead
    cannot be passed through Accelerate yet."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*deprecated", category=FutureWarning)
        yield


def end_process_group() -> None:
    """At the end of a launched run: wait for every process, then leave the process group in
    order. A process that exits with the group alive leaves the backend's threads and
    connections to be torn down during interpreter exit, which can abort (SIGABRT) a run that
    has already finished; torch asks for this call too. Nothing to do for one process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def exit_after_launch(code: int = 0) -> None:
    """End a launched process (``WORLD_SIZE`` > 1) that has done its work and left the process
    group: its at-exit handlers run and its output is flushed, then it exits without the
    interpreter's final teardown. DDP and the exchange's futures still hold the backend of the
    left group, and gloo's worker threads can abort the process (SIGABRT, "terminate called
    without an active exception") when their tensors are freed while the interpreter shuts
    down: seen intermittently at the end of finished 2- and 4-process runs. Nothing is left to
    do by then. Outside a launcher (one process, a notebook) it does nothing."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    import atexit
    import logging

    atexit._run_exitfuncs()  # what a normal exit would run first (ptyacc's own folder locks among them)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def get_attribute(model: nn.Module, name: str):
    """An attribute (parameter, buffer, method) of the model, wrapped or not."""
    return getattr(unwrap(model), name)


def choose_backend(requested: str, device_type: str, system: str | None = None) -> str:
    """'nccl' only for CUDA devices on Linux; 'gloo' for CPU, Windows and macOS."""
    system = system or platform.system()
    if requested == "nccl":
        if device_type != "cuda" or system != "Linux":
            raise DistributedError(f"runtime.backend: nccl needs CUDA GPUs on Linux (here: {device_type} on {system}); "
                                   "use gloo or auto")
        return "nccl"
    if requested == "gloo":
        return "gloo"
    return "nccl" if device_type == "cuda" and system == "Linux" else "gloo"


def resolve_device(requested: str) -> str:
    """'auto' -> cuda if available, else mps, else cpu; an unavailable explicit device is an error."""
    cuda = torch.cuda.is_available()
    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if requested == "auto":
        return "cuda" if cuda else ("mps" if mps else "cpu")
    if requested == "cuda" and not cuda:
        raise DistributedError("runtime.device: cuda requested but torch sees no CUDA GPU")
    if requested == "mps" and not mps:
        raise DistributedError("runtime.device: mps requested but torch sees no Apple GPU")
    return requested


def make_accelerator(runtime: RuntimeConfig, output: OutputConfig | None = None):
    """An Accelerator on the configured device and backend, after the launch guards; with
    ``output``, its project folder is output.dir and its trackers output.trackers."""
    from accelerate import Accelerator

    _refuse_mixed_precision()
    _check_launcher_environment()
    _check_lone_process_launch()
    device_type = "cpu" if _launcher_forces_cpu(runtime.device) else resolve_device(runtime.device)
    backend = choose_backend(runtime.backend, device_type)  # refuse a forced backend this device cannot use, even alone
    if device_type == "cuda":
        _check_gpu_count(backend=backend)
        _share_gpus()
    _forget_other_device(device_type)
    # only a run with trackers asks for them: without, the Accelerator is made as it always was
    tracking = {"log_with": output.trackers, "project_dir": output.dir} if output and output.trackers else {}
    accelerator = Accelerator(cpu=device_type == "cpu", mixed_precision="no",
                              kwargs_handlers=kwargs_handlers(runtime, device_type), **tracking)
    check_world_size(accelerator.num_processes)
    if accelerator.device.type != device_type:
        raise DistributedError(f"runtime.device: {device_type} asked, but this process's Accelerate state is on "
                               f"{accelerator.device.type} and cannot change while several processes run; "
                               "launch a new run for the other device")
    return accelerator


def _forget_other_device(device_type: str) -> None:
    """Accelerate keeps one device per Python process: an Accelerator made after one on another device (a
    notebook's CPU run, then its GPU run; the selftest's CPU check, then its GPU checks) silently takes the first
    one's. In a process of its own (no launcher) that state is forgotten, so each run gets the device it asks."""
    from accelerate.state import AcceleratorState, PartialState

    if not PartialState._shared_state or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return
    held = PartialState().device
    if held is not None and held.type != device_type:
        AcceleratorState._reset_state(reset_partial_state=True)


def kwargs_handlers(runtime: RuntimeConfig, device_type: str, environ: dict | None = None) -> list:
    """Accelerate's DDP and process-group settings for this run."""
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    environ = os.environ if environ is None else environ
    # Buffers (positions, propagator) never change, so broadcasting them each step is waste;
    # every parameter takes part in every forward, so no search for unused ones.
    # One bucket for all gradients: the exchange (ptyacc/reconstruction/exchange.py) sends each step in one collective.
    # Gradients as views of that bucket: DDP then copies the whole object gradient into the
    # bucket once per step and never back out (two whole-object copies fewer per step).
    handlers = [DistributedDataParallelKwargs(broadcast_buffers=False, find_unused_parameters=False,
                                              bucket_cap_mb=BUCKET_CAP_MB, gradient_as_bucket_view=True)]
    if int(environ.get("WORLD_SIZE", "1")) > 1:  # a process group only when launched as several
        backend = choose_backend(runtime.backend, device_type)
        handlers.append(InitProcessGroupKwargs(backend=backend, timeout=timedelta(seconds=runtime.timeout_s)))
    return handlers


def check_world_size(num_processes: int, environ: dict | None = None) -> None:
    """A launcher that set WORLD_SIZE=N but left the processes unconnected would make N copies
    of the same run that silently duplicate work. Stop instead."""
    environ = os.environ if environ is None else environ
    launched = environ.get("WORLD_SIZE")
    if launched is not None and int(launched) != num_processes:
        hint = (" On a machine without GPUs use `accelerate launch --multi_gpu --num_processes N` with "
                "ACCELERATE_USE_CPU=1 (or runtime.device: cpu); `--cpu --num_processes N` starts one process."
                if not torch.cuda.is_available() else "")
        raise DistributedError(f"the launcher started WORLD_SIZE={launched} processes but this one joined a group of "
                               f"{num_processes}: the processes are not connected and would duplicate work.{hint}")


def _check_launcher_environment(environ: dict | None = None) -> None:
    """WORLD_SIZE > 1 without the rest of a launcher's variables: a hand-set or leftover
    environment, not a launch; joining a process group would fail or wait for peers forever."""
    environ = os.environ if environ is None else environ
    if int(environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in environ]
    if missing:
        raise DistributedError(f"WORLD_SIZE={environ['WORLD_SIZE']} is set but {', '.join(missing)} "
                               f"{'is' if len(missing) == 1 else 'are'} not: start several processes with "
                               "`accelerate launch` or `torchrun`, or unset WORLD_SIZE for one process")


def _launcher_forces_cpu(requested: str, environ: dict | None = None) -> bool:
    """ACCELERATE_USE_CPU (an accelerate config's ``use_cpu: true``, ``--cpu``, or set by hand)
    makes accelerate put every process on the CPU with gloo whatever ptyacc asks; follow it, so
    that on a machine with GPUs ptyacc does not ask for NCCL (accelerate would refuse it)."""
    environ = os.environ if environ is None else environ
    forced = environ.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes", "y", "t", "on")
    if forced and requested in ("cuda", "mps"):
        raise DistributedError(f"runtime.device: {requested}, but the launcher forces the CPU (ACCELERATE_USE_CPU="
                               f"{environ['ACCELERATE_USE_CPU']}: use_cpu: true in the accelerate config, or --cpu); "
                               "set runtime.device: cpu or auto, or use_cpu: false")
    return forced


# Process counts that MPI launchers set; accelerate's MULTI_CPU mode reads them under mpirun.
MPI_WORLD_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _check_lone_process_launch(environ: dict | None = None) -> None:
    """accelerate's simple launcher (an accelerate config with ``distributed_type: MULTI_CPU``
    and no mpirun, or ``--cpu``, or no distributed type, with more than one process) starts ONE
    process: it sets MASTER_ADDR and MASTER_PORT because more were asked for, but no WORLD_SIZE,
    so this process would run alone, slower than a plain run. Other launchers set WORLD_SIZE
    (accelerate's multi-GPU mode, torchrun) or an MPI size (mpirun)."""
    environ = os.environ if environ is None else environ
    launched_by_accelerate = "ACCELERATE_DYNAMO_BACKEND" in environ  # set by every `accelerate launch`
    if not launched_by_accelerate or "WORLD_SIZE" in environ or any(v in environ for v in MPI_WORLD_SIZE_VARIABLES):
        return
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        raise DistributedError(
            "`accelerate launch` started one process where its settings ask for several (distributed_type "
            "MULTI_CPU without mpirun, NO or --cpu, with num_processes > 1: MASTER_ADDR is set, WORLD_SIZE is "
            "not), so it would run alone, slower than a plain run. For N processes on CPUs use `accelerate launch "
            "--multi_gpu --num_processes N` with ACCELERATE_USE_CPU=1 (configs/accelerate/cpu_multi_process.yaml) "
            "or `torchrun --nproc_per_node N -m ptyacc.run`; for one, num_processes 1 and no MASTER_ADDR in the "
            "environment")


def _refuse_mixed_precision(environ: dict | None = None) -> None:
    environ = os.environ if environ is None else environ
    requested = environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if requested not in ("no", ""):
        raise DistributedError(f"mixed precision {requested!r} requested by the accelerate config: ptyacc's complex "
                               "FFTs run in float32 only (autocast skips them and the grad scaler cannot handle "
                               "complex gradients). Set mixed_precision: 'no' in the accelerate config.")


def _check_gpu_count(environ: dict | None = None, backend: str = "nccl") -> None:
    """More processes than GPUs: NCCL refuses two ranks on one GPU, so only a run that asks for
    gloo may share them (slower; for tests: the suite's multi-process tests on one GPU)."""
    local, visible, over = _processes_over_gpus(environ)
    if over and backend != "gloo":
        raise DistributedError(f"{local} processes on this node but only {visible} visible GPU(s): NCCL cannot put two "
                               "processes on one GPU; lower --num_processes (or, to test on one GPU, set "
                               "runtime.backend: gloo, slower)")
    if local > 1 and any("MIG" in torch.cuda.get_device_name(i) for i in range(visible)):
        raise DistributedError("MIG slices cannot be joined in one multi-process run (NCCL does not support "
                               "them); run one process per MIG slice or use whole GPUs")


def _share_gpus(environ: dict | None = None, visible: int | None = None) -> bool:
    """More processes than GPUs on this node (allowed under gloo, ``_check_gpu_count``): Accelerate puts each
    process on GPU local rank modulo the count, but hands DDP the local rank itself as its device, which does not
    exist past the last GPU (an IndexError in DDP's first forward). Without that device map DDP takes the GPU the
    model is on. Says whether it was needed."""
    environ = os.environ if environ is None else environ
    if not _processes_over_gpus(environ, visible)[2]:
        return False
    environ["ACCELERATE_BYPASS_DEVICE_MAP"] = "true"
    return True


def _processes_over_gpus(environ: dict | None = None, visible: int | None = None) -> tuple[int, int, bool]:
    """This node's processes (``LOCAL_WORLD_SIZE``), its visible GPUs (``visible``, else CUDA's count) and whether
    the processes are more."""
    environ = os.environ if environ is None else environ
    local = int(environ.get("LOCAL_WORLD_SIZE", "1"))
    visible = torch.cuda.device_count() if visible is None else visible
    return local, visible, local > visible


def wait_for_everyone(accelerator) -> None:
    """Accelerate's barrier with the GPU each process is on: Accelerate names it by local rank, which does not
    exist past the last GPU where processes share them (``_share_gpus``: 'invalid device ordinal' on an H200
    shared by two). Under NCCL the barrier runs on that GPU; under gloo on the CPU, as its collectives do."""
    if accelerator.num_processes == 1:
        return
    device = accelerator.device
    if device.type == "cuda" and torch.distributed.get_backend() == "nccl":
        torch.distributed.barrier(device_ids=[device.index if device.index is not None else 0])
    else:
        torch.distributed.barrier()


def parameter_checksum(model: nn.Module) -> str:
    """Hash of the exact bytes of every parameter that all processes hold alike, to compare
    processes (those DDP ignores, the split object of ``runtime.shard_object``, differ by design)."""
    digest = hashlib.sha256()
    bare = unwrap(model)
    own = set(getattr(bare, "_ddp_params_and_buffers_to_ignore", ()))
    for name, p in sorted(bare.named_parameters()):
        if name in own:
            continue
        digest.update(name.encode())
        digest.update(p.detach().to("cpu").contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_in_sync(accelerator, model: nn.Module, iteration: int) -> None:
    """Stop with a clear error if the processes' parameters are not bit-identical."""
    if accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    sums = gather_object([parameter_checksum(model)])
    if len(set(sums)) > 1:
        ranks = ", ".join(f"rank {r}: {s[:12]}" for r, s in enumerate(sums))
        raise DistributedError(f"processes hold different parameters after iteration {iteration} ({ranks}); "
                               "the run is not reproducible across ranks and was stopped")
