"""What one reconstruction step asks of the host: the calls that would wait for a GPU (a
host-device synchronisation) and the operators it dispatches (on a GPU, about one kernel launch
each). On a GPU both decide the time of small problems; on a CPU neither costs much, so they are
counted here, on any device, by watching the calls rather than timing them (benchmarks/records/2026-11-27-performance.md).

The count follows which tensors would live on the device: the model's parameters and buffers,
the patterns held there, whatever is made from them or created with an explicit ``device=``, and
what ``to(device)`` copies there; tensors made from NumPy or without a device are on the host.
A call is a synchronisation where it needs a device tensor's value on the host (``item``,
``bool``, ``int``, ``float``, ``tolist``, ``numpy``, ``cpu``), where it copies a host tensor to
the device with ``non_blocking=False`` (torch then waits for the stream), or where an operator's
output size depends on a device tensor's values (``nonzero``, ``masked_select``, ``unique``,
``equal``). Autograd's backward pass is not looked into (it asks nothing of the host). On CUDA
``torch.cuda.set_sync_debug_mode("warn")`` gives the driver's own figure.
"""

from __future__ import annotations

import collections
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

HOST_VALUE_CALLS = {"item", "__bool__", "__int__", "__float__", "__index__", "tolist", "numpy", "cpu"}
DATA_SIZED_CALLS = {"nonzero", "masked_select", "unique", "unique_consecutive", "equal", "argwhere"}
COPIES = {"to", "cuda", "copy_"}
HERE = Path(__file__).resolve()
WATCHED = ("ptyacc", "accelerate")  # the packages whose calls are reported by place


def call_site() -> str:
    """``package/module.py:line`` of the innermost frame in ptyacc or accelerate (this module and
    torch left out), else '?'."""
    frame = sys._getframe(2)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path != HERE and any(part in WATCHED for part in path.parts[-4:-1]):
            parts = path.parts
            start = max(i for i, part in enumerate(parts) if part in WATCHED)
            return f"{'/'.join(parts[start:])}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class TensorSet:
    """Tensors held weakly, by identity (a WeakSet compares tensors with ``==``)."""

    def __init__(self):
        self.refs: dict[int, weakref.ref] = {}

    def add(self, tensor: torch.Tensor) -> None:
        key = id(tensor)
        self.refs[key] = weakref.ref(tensor, lambda _, key=key: self.refs.pop(key, None))

    def __contains__(self, tensor: torch.Tensor) -> bool:
        ref = self.refs.get(id(tensor))
        return ref is not None and ref() is tensor


class DeviceCalls(TorchFunctionMode):
    """Counts, by place in the code, the calls that would synchronise a GPU, and every call
    (``calls``); ``on_device`` holds (weakly) the tensors that would live on the device."""

    def __init__(self, on_device: TensorSet, sites: collections.Counter, calls: collections.Counter):
        super().__init__()
        self.on_device, self.sites, self.calls = on_device, sites, calls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        from_device = any(t in self.on_device for t in inputs)
        if from_device and (name in HOST_VALUE_CALLS or name in DATA_SIZED_CALLS):
            self.sites[f"{name} {call_site()}"] += 1
        elif name in COPIES and not from_device and _names_device(args, kwargs) and not kwargs.get("non_blocking"):
            self.sites[f"{name} (to the device) {call_site()}"] += 1
        result = func(*args, **kwargs)
        to_device = name not in HOST_VALUE_CALLS and (from_device or _names_device(args, kwargs))
        if name in COPIES | {"cpu"} and result is args[0] and to_device != from_device:
            result = result.view_as(result)  # a copy between host and device, on a CPU the same tensor: a view of it
        if to_device:
            for out in tree_flatten(result)[0]:
                if isinstance(out, torch.Tensor):
                    self.on_device.add(out)
        self.calls[name] += 1
        return result


def _names_device(args, kwargs) -> bool:
    """Whether a call names a device (``to(device)``, ``zeros(..., device=...)``)."""
    return any(isinstance(t, (str, torch.device)) for t in [*args[1:], kwargs.get("device")])


class StepCounter:
    """Counts per step, from one ``on_step`` call to the next (a whole step: the loader's next
    item, loss, gradient, exchange, update). ``seed``: the tensors on the device when counting
    starts (parameters, buffers, held patterns). The run's last step is not counted (it runs
    into the iteration's hooks)."""

    def __init__(self, from_iteration: int = 1):
        self.from_iteration = from_iteration
        self.on_device = TensorSet()
        self.steps: list[dict] = []
        self._open: tuple | None = None

    def seed(self, tensors) -> None:
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                self.on_device.add(tensor)

    def on_step(self, iteration: int, indices) -> None:
        self.finish()
        if iteration >= self.from_iteration:
            sites, calls = collections.Counter(), collections.Counter()
            mode = DeviceCalls(self.on_device, sites, calls)
            mode.__enter__()
            self._open = (mode, sites, calls)

    def finish(self) -> None:
        """Stop counting the step under way and keep its figures."""
        if self._open is None:
            return
        mode, sites, calls = self._open
        mode.__exit__(None, None, None)
        self._open = None
        self.steps.append({"syncs": sum(sites.values()), "by_site": dict(sites), "calls": sum(calls.values())})

    def summary(self) -> dict:
        """The median step's syncs (and their places) and torch calls."""
        if len(self.steps) < 2:
            raise ValueError("fewer than two steps were counted: run more steps after from_iteration")
        counted = self.steps[:-1]  # the last ran into the iteration's end
        middle = sorted(counted, key=lambda s: s["syncs"])[len(counted) // 2]
        return {"steps_counted": len(counted), "syncs_per_step": middle["syncs"], "sync_sites": middle["by_site"],
                "calls_per_step": sorted(s["calls"] for s in counted)[len(counted) // 2]}


def count_steps(config, iterations: int = 2) -> dict:
    """Run ``config`` for ``iterations`` (no files written) and count its steps after the first
    iteration; with ``operators_per_step`` from the profiler (operators that reach a device
    kernel: views and the like excluded)."""
    from ptyacc.reconstruction.engine import Reconstructor

    config.optim.iterations = iterations
    counter = StepCounter(from_iteration=1)
    rec = Reconstructor(config, write=False, on_step=counter.on_step)
    with rec.closing:
        rec.build()
        counter.seed([*rec.model.parameters(), *rec.model.buffers(), *vars(rec.store).values()])
        with operator_profile() as ops:
            rec.run()
        counter.finish()
    summary = counter.summary()
    summary["operators_per_step"] = round(ops.total / max(rec.history.done * len(rec.loader), 1))
    return summary


class operator_profile:
    """Counts aten operators that do work (not views, not the autograd wrappers) while open."""

    VIEWS = {"aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::expand", "aten::permute", "aten::transpose",
             "aten::t", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::view_as_real",
             "aten::view_as_complex", "aten::alias", "aten::detach", "aten::reshape", "aten::lift_fresh",
             "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg",
             "aten::_reshape_alias", "aten::unbind", "aten::split", "aten::chunk", "aten::narrow", "aten::flatten",
             "aten::contiguous", "aten::to", "aten::_to_copy", "aten::result_type", "aten::size", "aten::stride",
             "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::numpy_T", "aten::expand_as",
             "aten::view_as", "aten::movedim", "aten::real", "aten::imag", "aten::_neg_view", "aten::_conj"}

    def __enter__(self):
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.profiler.__enter__()
        return self

    def __exit__(self, *exc):
        self.profiler.__exit__(*exc)
        self.total = sum(1 for e in self.profiler.events() if e.name.startswith("aten::") and e.name not in self.VIEWS
                         and not any(c.name.startswith("aten::") for c in e.cpu_children))
        return False


def cuda_syncs_per_step(config, iterations: int = 2) -> dict:
    """On CUDA, the driver's own count: ``torch.cuda.set_sync_debug_mode("warn")`` warns at every
    synchronising call; the warnings between one step's start and the next are that step's
    (the median over the steps after the first iteration, and the places of the first step's)."""
    import warnings

    from ptyacc.reconstruction.engine import reconstruct

    config.optim.iterations = iterations
    starts: list[int] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")

        def on_step(iteration: int, indices) -> None:
            if iteration >= 1:
                starts.append(len(seen))

        torch.cuda.set_sync_debug_mode("warn")
        try:
            reconstruct(config, write=False, on_step=on_step)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    counts = [b - a for a, b in zip(starts, starts[1:])]
    if not counts:
        raise ValueError("fewer than two steps were counted: run more steps")
    first = [f"{Path(w.filename).name}:{w.lineno}" for w in seen[starts[0]:starts[1]]]
    return {"syncs_per_step": sorted(counts)[len(counts) // 2], "sync_sites": dict(collections.Counter(first))}


def sync_lines(summary: dict) -> Iterator[str]:
    yield (f"{summary['syncs_per_step']} host-device synchronisation(s) per step, {summary['operators_per_step']} "
           f"operators per step (median of {summary['steps_counted']} steps)")
    for site, count in sorted(summary["sync_sites"].items()):
        yield f"  {count} x {site}"
