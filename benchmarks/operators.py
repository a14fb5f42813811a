"""The operators of one reconstruction step by kind, counted rather than timed: every aten operator
that reaches a kernel (forward, the fused data term, backward, the optimizers' updates), sorted
into FFTs (``wave_ffts``: those over the whole batch's waves, the transforms ``ptyacc bench``'s FFT
bound times), passes over the batch's waves (an operator whose output holds at least batch x K x K
elements: the elementwise work whose cost grows with the batch) and the rest (small operators, whose
cost on a GPU is the launch). Views and allocations are not operators here (no kernel runs).

Counted with a ``TorchDispatchMode``, so the figures are the same on every machine and every run;
tests/test_operators.py holds them for small cases and benchmarks/records/2026-11-27-performance.md lists the shipped ones.
"""

from __future__ import annotations

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ptyacc.speed import syncs

NO_KERNEL = {"_unsafe_view", "_reshape_alias", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
             "lift_fresh", "detach", "alias", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "size",
             "stride", "is_same_size", "resolve_conj", "resolve_neg", "_conj", "_neg_view", "set_",
             "_record_function_enter", "_record_function_enter_new", "_record_function_exit"}  # the profiler's marks
FFTS = {"_fft_c2c", "_fft_r2c", "_fft_c2r"}
KINDS = ("operators", "passes", "ffts", "wave_ffts", "other")


class OperatorKinds(TorchDispatchMode):
    """Counts the operators dispatched while open: ``counts`` by kind, ``names`` by aten name and
    kind. ``wave_elements``: batch x K x K, the size from which an operator is a pass."""

    def __init__(self, wave_elements: int):
        super().__init__()
        self.wave_elements = wave_elements
        self.counts: collections.Counter = collections.Counter()
        self.names: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if not func.is_view and name not in NO_KERNEL:
            kind = "ffts" if name in FFTS else "passes" if _largest(result) >= self.wave_elements else "other"
            self.counts["operators"] += 1
            self.counts[kind] += 1
            self.names[f"{name} ({kind})"] += 1
            if kind == "ffts" and _largest(result) >= self.wave_elements:
                self.counts["wave_ffts"] += 1
        return result


def _largest(result) -> int:
    return max((t.numel() for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)), default=0)


class StepKinds:
    """Per step, from one ``on_step`` call to the next (as ``syncs.StepCounter``): the operators by
    kind, for the steps of ``from_iteration`` on."""

    def __init__(self, window_px: int, from_iteration: int = 1):
        self.window_px, self.from_iteration = window_px, from_iteration
        self.steps: list[tuple[int, OperatorKinds]] = []
        self._open: OperatorKinds | None = None

    def on_step(self, iteration: int, indices) -> None:
        self.finish()
        if iteration >= self.from_iteration:
            self._open = OperatorKinds(len(indices) * self.window_px ** 2)
            self._open.__enter__()
            self.steps.append((len(indices), self._open))

    def finish(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None


def count_operators(config, iterations: int = 2, from_iteration: int = 1) -> dict:
    """Run ``config`` for ``iterations`` (no files written) and count each step from iteration
    ``from_iteration`` on (0-based: count after the groups that start later have started). The
    operators by kind: the median over the full-batch steps (the first of an iteration also does
    the iteration's own work, the last runs into its end: ``spread`` shows them), with the median
    step's operators by name; host-device synchronisations (``syncs.StepCounter``); the profiler's
    operators (``syncs.operator_profile``, over the whole run, for comparison); ``bound_ffts``: the
    transforms of ``ptyacc bench``'s FFT bound per step."""
    from ptyacc.reconstruction.engine import Reconstructor
    from ptyacc.speed.bench import ffts_per_step, per_position_shift

    config.optim.iterations = iterations
    waits = syncs.StepCounter(from_iteration=from_iteration)
    kinds: StepKinds | None = None

    def on_step(iteration, indices):
        waits.on_step(iteration, indices)
        kinds.on_step(iteration, indices)

    rec = Reconstructor(config, write=False, on_step=on_step)
    with rec.closing:
        rec.build()
        kinds = StepKinds(rec.model.window, from_iteration)
        waits.seed([*rec.model.parameters(), *rec.model.buffers(), *vars(rec.store).values()])
        with syncs.operator_profile() as profile:
            rec.run()
        kinds.finish()
        waits.finish()
    summary = waits.summary()
    full = max(size for size, _ in kinds.steps)
    counted = [mode for size, mode in kinds.steps[:-1] if size == full]  # the last ran into the iteration's end
    middle = sorted(counted, key=lambda mode: mode.counts["operators"])[len(counted) // 2]
    return {**{kind: middle.counts[kind] for kind in KINDS}, "by_name": dict(middle.names),
            "steps_counted": len(counted), "batch": full, "window_px": rec.model.window,
            "spread": {kind: (min(m.counts[kind] for m in counted), max(m.counts[kind] for m in counted))
                       for kind in KINDS},
            "syncs": summary["syncs_per_step"], "sync_sites": summary["sync_sites"],
            "profiler_operators": round(profile.total / max(rec.history.done * len(rec.loader), 1)),
            "steps_per_iteration": len(rec.loader),
            "bound_ffts": ffts_per_step(config.model.slices, per_position_shift(rec.model), rec.model.near_field)}


def field_pass_counts(far: torch.Tensor, measured: torch.Tensor, kind: str, weights: torch.Tensor | None = None,
                      background: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                      conjugated: bool = False, planar: bool | None = None, floor: float | None = None) -> dict:
    """The operators of the data term's pass from the detector field ``far`` (B, ..., K, K) complex to its gradient
    field: ``eager``, ``ptycho_loss``'s complex path counted by kind as in a step (after a first call, as every step
    but the run's first); ``compiled``, under ``runtime.compile``, the kernels TorchInductor generates for the field
    pass (``CompiledTerms``' ``planar`` layout, by default that of ``far``'s device) plus the operators
    ``CompiledTerms.field`` leaves outside them: the gain's and the background's sums, and in the planar layout the
    copies of the real and imaginary parts into planes. ``floor``: as a step passes it (the amplitude loss's floor
    in the patterns' units). A dispatch mode cannot see inside
    compiled code (torch.compile runs eagerly under one), so a compiled step's operators are its eager count less
    ``eager``'s plus ``compiled``. Overwrites ``far`` (with its gradient field, as a step does)."""
    import torch._inductor.metrics as metrics

    from ptyacc.physics.fused import CompiledTerms, eager_field_terms

    def eager(field: torch.Tensor) -> None:
        eager_field_terms(field, measured, kind, weights, background, mask, conjugated, floor=floor)

    torch._dynamo.reset()
    metrics.reset()
    compiled = CompiledTerms(report=lambda text: None, planar=planar)
    compiled.field(far, measured, kind, weights, background, mask, conjugated,  # leaves ``far`` as it is
                   floor=floor)
    if compiled.failure is not None:
        raise RuntimeError(f"torch.compile failed: {compiled.failure}")
    eager(far.clone())  # the constants made once per run
    with OperatorKinds(far.shape[0] * far.shape[-1] * far.shape[-2]) as kinds:
        eager(far)
    planar = planar if planar is not None else far.device.type == "cpu"
    outside = (weights is not None) + (background is not None) + (2 if planar else 0)
    return {"eager": dict(kinds.counts), "compiled": metrics.generated_kernel_count + outside}
