"""The gradient exchange between processes: only the object region that a step touched.

Every step's windows cover a small part of the object, so summing the whole object gradient
over the processes (DDP's dense all-reduce) moves mostly zeros: on a 320 x 320 x 4-slice
object that was 97 MiB per iteration and made two processes slower than one. Every process
knows the whole global batch (it comes from the seed), so every process works out the same
footprint, the bounding box of the global batch's windows, without communicating.

How the object's gradient leaves the dense all-reduce: the model stays a DDP model prepared
by Accelerate, and a DDP communication hook replaces the all-reduce of each gradient bucket.
The hook packs the footprint of the object's gradient and the whole gradient of every other
parameter (probe, positions, detector) into one buffer and all-reduces that; outside the
footprint every process's gradient is exactly zero (no window of the step lies there), which
is also the sum. Why a hook rather than DDP's ignored parameters plus a collective of our own:
the hook keeps everything in one collective per step (ignored parameters would need a second
one for the rest, and DDP refuses to ignore all parameters), DDP still checks that every
process runs the same backward passes, and the result is the dense all-reduce's on every
pixel. DDP's buckets are made large enough to hold all gradients (``BUCKET_CAP_MB``), so a
step is one collective of (footprint + probe + positions) bytes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

BUCKET_CAP_MB = 4096  # one DDP bucket for all gradients: one collective per step
# a footprint covering at least this fraction of the object is sent whole, in DDP's own buffer:
# packing it would copy nearly every byte twice (in and out of the packed buffer) to save a few
WHOLE_FRACTION = 0.9
KINDS = ("object", "probe", "other")


def footprint_box(corners: np.ndarray, window: int) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): the smallest box of object pixels holding every K x K window whose
    top-left pixels are ``corners`` (B, 2) integer (y, x); rows y0:y1, columns x0:x1."""
    corners = np.asarray(corners)
    if len(corners) == 0:
        return 0, 0, 0, 0
    y0, x0 = (int(v) for v in corners.min(axis=0))
    y1, x1 = (int(v) + window for v in corners.max(axis=0))
    return y0, y1, x0, x1


def collective_events(tensor: torch.Tensor) -> tuple[torch.cuda.Event, torch.cuda.Event] | None:
    """For a collective on a GPU tensor: a started timing event on the current stream and one to
    record once it is done (their interval is read after the iteration, without a wait per step:
    NCCL returns when the collective is queued, so the host's clock would read about 0); None on a CPU."""
    if not tensor.is_cuda:
        return None
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    return start, torch.cuda.Event(enable_timing=True)


def timed_all_reduce(tensor: torch.Tensor, **options):
    """``dist.all_reduce(tensor)``, and the wait for it: seconds, or on a GPU its (start, end)
    events (``collective_events``), for ``GradientExchange.count``."""
    import torch.distributed as dist

    events = collective_events(tensor)
    start = time.perf_counter()
    dist.all_reduce(tensor, **options)
    if events is None:
        return time.perf_counter() - start
    events[1].record()
    return events


def on_any_process(flag: torch.Tensor, world: int) -> bool:
    """Whether the 0-d ``flag`` is true on any of ``world`` processes (one all-reduce when several),
    so that all stop together: one process alone stopping would leave the others waiting in a collective."""
    flag = flag.to(torch.int32)
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag)


@dataclass
class Traffic:
    """What one process exchanged in one iteration: bytes per kind of parameter, collectives,
    and seconds from launching each collective to its completion (waiting for the slowest
    process included: ptyacc's data term hands all gradients over at once, so nothing hides it)."""

    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    calls: int = 0
    wait_s: float = 0.0

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


class GradientExchange:
    """Sums the gradients of a step over the processes, sending only the step's object footprint.

    ``begin_step(batch)`` tells it the global batch before the backward pass; the DDP hook does
    the rest; ``take()`` hands over what was exchanged since the last call."""

    def __init__(self, model: nn.Module, world: int, footprint: bool = True) -> None:
        self.model, self.world, self.footprint = model, world, footprint
        self.box: tuple[int, int, int, int] | None = None  # None: the whole object
        self.current = Traffic()
        self.timed: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # a GPU's collectives, read at take()

    @classmethod
    def attach(cls, wrapped: nn.Module, model: nn.Module, world: int, footprint: bool = True
               ) -> GradientExchange | None:
        """Install the exchange on the DDP-wrapped model; None for one process (nothing to
        exchange). ``footprint`` False sends the whole object every step (``runtime.object_exchange: dense``)."""
        if world < 2 or not hasattr(wrapped, "register_comm_hook"):
            return None
        exchange = cls(model, world, footprint)
        wrapped.register_comm_hook(None, exchange.hook)
        return exchange

    def begin_step(self, batch: torch.Tensor) -> None:
        """The footprint of the step whose global batch is ``batch`` (B,), from the current
        positions; None (the whole object) when it covers ``WHOLE_FRACTION`` of it or more."""
        if not self.footprint:
            return
        corners = self.model.window_corners(batch.to(self.model.positions_px.device))
        y0, y1, x0, x1 = footprint_box(corners.cpu().numpy(), self.model.window)
        height, width = self.model.object_shape
        self.box = None if (y1 - y0) * (x1 - x0) >= WHOLE_FRACTION * height * width else (y0, y1, x0, x1)

    def count(self, kind: str, nbytes: int, wait_s) -> None:
        """A collective made outside the hook (the object tiles' halo exchange, ``ptyacc/reconstruction/tiles.py``);
        ``wait_s``: seconds, or on a GPU the (start, end) events around it (``collective_events``)."""
        self.current.bytes[kind] += nbytes
        self.current.calls += 1
        if isinstance(wait_s, tuple):
            self.timed.append(wait_s)
        else:
            self.current.wait_s += wait_s

    def take(self) -> Traffic:
        """The traffic since the last call (an iteration's), and start counting afresh. On a GPU the
        collectives' seconds are read here from their events (one wait, at the iteration's end)."""
        for start, end in self.timed:
            end.synchronize()
            self.current.wait_s += start.elapsed_time(end) / 1e3
        self.timed = []
        taken, self.current = self.current, Traffic()
        return taken

    def hook(self, state, bucket):  # DDP checks the annotation: none, or Future[Tensor] unquoted
        import torch.distributed as dist

        # the bucket's buffer is its parameters' gradients one after another, in this order
        buffer, pieces, offset = bucket.buffer(), [], 0
        for param in bucket.parameters():
            grad = buffer[offset:offset + param.numel()].view(param.shape)
            offset += param.numel()
            kind = self._kind(param)
            if kind == "object" and self.box is not None:
                y0, y1, x0, x1 = self.box
                grad = grad[..., y0:y1, x0:x1, :]  # (O, S, h, w, 2)
            pieces.append(grad)
            self.current.bytes[kind] += grad.numel() * grad.element_size()
        self.current.calls += 1
        # nothing cut out (the whole object): the buffer itself is summed, in place, unpacked
        packed = buffer if self.box is None else torch.cat([piece.reshape(-1) for piece in pieces])
        packed.div_(self.world)
        # NCCL's future completes when the collective is queued, not done: on a GPU the time is taken
        # by events on the stream (read at take()), elsewhere by the clock when the sum has arrived
        events = collective_events(packed)
        start = time.perf_counter()
        future = dist.all_reduce(packed, async_op=True).get_future()

        def unpack(fut) -> torch.Tensor:
            summed = fut.value()[0]
            if packed is not buffer:
                offset = 0
                for piece in pieces:
                    piece.copy_(summed[offset:offset + piece.numel()].view_as(piece))
                    offset += piece.numel()
            if events:
                events[1].record()
                self.timed.append(events)
            else:
                self.current.wait_s += time.perf_counter() - start
            return buffer

        return future.then(unpack)

    def _kind(self, param: torch.Tensor) -> str:
        if param is self.model.object:
            return "object"
        return "probe" if param is self.model.probe else "other"
