"""Patterns that are not all on the device (``data.hold: host | disk``): the store that answers
a step's ``measured(indices)`` by reading those rows (from host memory or from the file) and
copying them to the device, and the background reader that prepares the next steps while the
current one computes (the epoch's steps are known from the seed: ``expect``)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from ptyacc.data.bright_field import sample_rows
from ptyacc.errors import DataError

ReadRows = Callable[[np.ndarray], np.ndarray]  # sorted distinct position indices -> (n, K, K) float32 prepared
PREFETCH_STEPS = 2  # steps read ahead: one being copied while one waits, a batch's memory each


class StreamedStore:
    """The patterns (H, K, K) this process holds, read ``rows`` at a time by ``read`` (any thread),
    answering ``measured`` like ``store.PatternStore``.

    read:        sorted distinct position indices (n,) -> their prepared patterns (n, K, K) float32
    held:        the positions this process holds (sorted); None = all ``n_positions``
    rank:        this process's index: ``expect`` takes its share of every step
    """

    holds_on_device = False

    def __init__(self, read: ReadRows, held: np.ndarray | None, n_positions: int, device: torch.device | str,
                 rank: int = 0) -> None:
        self.read, self.rank, self.device = read, rank, torch.device(device)
        self.held = np.arange(n_positions) if held is None else np.asarray(held)
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptyacc-prefetch")
        self._copies = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._upcoming: deque[np.ndarray] = deque()
        self._pending: deque[tuple[np.ndarray, Future]] = deque()
        self._lock = threading.Lock()
        self.prefetched = self.direct = 0  # steps answered from the prefetch / read when asked

    def expect(self, pieces: list[list[np.ndarray]]) -> None:
        """The coming epoch: ``pieces[step][process]`` position indices; this process's share of
        each step is read ahead in that order. Reads already under way for an older plan finish
        and are dropped."""
        with self._lock:
            self._upcoming = deque(np.asarray(step[self.rank]) for step in pieces)
            self._pending.clear()
            self._fill()

    def measured(self, indices: torch.Tensor) -> torch.Tensor:
        """(b, K, K) float32 patterns of the positions ``indices`` (b,), on the device."""
        wanted = indices.cpu().numpy()
        with self._lock:
            ahead = self._pending.popleft() if self._pending and np.array_equal(self._pending[0][0], wanted) else None
            self._fill()
        if ahead is not None:
            self.prefetched += 1
            patterns, copied = ahead[1].result()
        else:
            self.direct += 1
            patterns, copied = self._on_device(wanted)
        if copied is not None:  # copied on the side stream: compute waits for this copy (not the next ones queued
            # behind it, which would undo the overlap), and the memory knows its user
            torch.cuda.current_stream(self.device).wait_event(copied)
            patterns.record_stream(torch.cuda.current_stream(self.device))
        return patterns

    def mean_of_sample(self, predict: Callable[[torch.Tensor], torch.Tensor], most: int = 128
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """As ``PatternStore.mean_of_sample``: the same sample, read without the rest."""
        return mean_of_sample(self, predict, most)

    def _fill(self) -> None:
        """Keep PREFETCH_STEPS reads under way (caller holds the lock)."""
        while self._upcoming and len(self._pending) < PREFETCH_STEPS:
            step = self._upcoming.popleft()
            self._pending.append((step, self._reader.submit(self._on_device, step)))

    def _on_device(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """The patterns of ``indices`` in their order: their rows read sorted and once each
        (contiguous runs in one read), then copied to the device; and on a GPU the event that
        marks the copy's end. The prefetch thread names its GPU (a thread starts on GPU 0: a
        process on another GPU would open a context there)."""
        rows, inverse = np.unique(indices, return_inverse=True)
        patterns = torch.from_numpy(self.read(rows))
        if not np.array_equal(rows, indices):
            patterns = patterns[torch.from_numpy(inverse.reshape(-1))]
        if self._copies is None:
            return patterns.to(self.device), None
        with torch.cuda.device(self.device), torch.cuda.stream(self._copies):
            copied = patterns.pin_memory().to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self._copies)
        return copied, done


class FileRows:
    """Prepared patterns read from an open pattern file (``readers.PatternFile``) by its
    ``read(rows, prepare)``, whatever the format; one read at a time (the prefetch thread and the
    loop share the file)."""

    def __init__(self, source, prepare: Callable[[np.ndarray], np.ndarray]) -> None:
        self.source, self.prepare = source, prepare
        self._lock = threading.Lock()

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        with self._lock:
            try:
                return self.source.read(rows, self.prepare).patterns
            except (OSError, RuntimeError) as exc:  # what h5py and memory maps raise for a file gone wrong
                raise DataError(f"{self.source.path}: reading {len(rows)} patterns during the run failed ({exc}); "
                                "with data.hold: disk the file must stay in place and unchanged until the run "
                                "ends (or use data.hold: host or device)") from exc


class HostRows:
    """Prepared patterns (H, K, K) held in host memory, in a compact type when they are counts
    (``compact_dtype``); called with position indices, it gives their rows as float32, values
    unchanged."""

    def __init__(self, patterns: np.ndarray, held: np.ndarray) -> None:
        self.patterns = patterns
        self._row_of = np.full(int(held.max()) + 1 if len(held) else 0, -1, dtype=np.int64)
        self._row_of[held] = np.arange(len(held))

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return self.patterns[self._row_of[rows]].astype(np.float32)


def mean_of_sample(store, predict: Callable[[torch.Tensor], torch.Tensor], most: int = 128
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean measured pattern and mean prediction over a seeded random sample of up to ``most`` of
    the positions ``store`` holds (every n-th position would alias with a raster scan and the
    crystal lattice and draw stripes that the data do not have)."""
    sample = np.random.default_rng(0).choice(len(store.held), size=min(most, len(store.held)), replace=False)
    pick = torch.as_tensor(store.held[np.sort(sample)], device=store.device)
    with torch.no_grad():
        return store.measured(pick).mean(0), predict(pick).mean(0)


def centred_means(store, predict: Callable[[torch.Tensor], torch.Tensor], near_field: bool, most: int = 128
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``mean_of_sample`` as results.h5 keeps it: float64 NumPy (K, K) each, far-field patterns
    with zero frequency at the centre, near-field images as they are."""
    measured, predicted = mean_of_sample(store, predict, most)
    measured, predicted = measured.double().cpu(), predicted.double().cpu()
    if near_field:
        return measured.numpy(), predicted.numpy()
    return torch.fft.fftshift(measured, dim=(-2, -1)).numpy(), torch.fft.fftshift(predicted, dim=(-2, -1)).numpy()


def compact_dtype(sample: np.ndarray) -> np.dtype:
    """uint16 when the prepared ``sample`` (n, K, K) float32 holds counts below 2^16 (every
    value an integer, none negative), else float32."""
    integer = sample.size and np.array_equal(sample, np.rint(sample)) and sample.min() >= 0
    return np.dtype(np.uint16) if integer and sample.max() < 2**16 else np.dtype(np.float32)


def fill_compact(read: ReadRows, rows: np.ndarray, shape: tuple[int, int], dtype: np.dtype,
                 block_bytes: int) -> np.ndarray:
    """(n, K, K) the prepared patterns ``rows`` read ``block_bytes`` of float32 at a time into
    ``dtype``; a block whose values ``dtype`` cannot hold exactly turns the whole into float32."""
    out = np.empty((len(rows), *shape), dtype=dtype)
    per_block = max(1, block_bytes // (4 * shape[0] * shape[1]))
    for start in range(0, len(rows), per_block):
        block = read(rows[start:start + per_block])
        if out.dtype != np.float32 and compact_dtype(block) != out.dtype:
            out = out.astype(np.float32)
        out[start:start + len(block)] = block
    return out


def sample_of(rows: np.ndarray, most: int = 256) -> np.ndarray:
    """Up to ``most`` evenly spread entries of ``rows`` (the same on every call)."""
    return rows[sample_rows(len(rows), most)]
