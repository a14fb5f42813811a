"""Which positions each process uses in each step, and who holds their patterns: the batches
dataset, the spatial partition of the scan, the shard plan worked out once per run, and the
pattern store that answers a step's ``measured(indices)``.

The batches dataset (``EpochBatches``).
Item ``j`` of an epoch is the piece of global batch ``j // W`` that belongs to process
``j % W``, where W is the number of processes. Accelerate's data-loader sharding with batch
size 1 hands item j to process j % W, so every process gets its own piece of every global
batch, all processes run the same number of steps (the length is a multiple of W), and every
position is used exactly once per epoch: no padding duplicates and no drops.
The order comes from ``seed`` and ``epoch`` alone, so it is identical on all processes and
changes every epoch.

Replicated mode (default): a global batch is drawn from all positions and split across the
processes. Sharded mode (``shards`` given, one array of positions per process): process r
draws its piece of every step from its own shard only, so it needs only those patterns.

Every item carries the whole global batch too: each process can then work out, without
communicating, which part of the object the step touches (the gradient exchange needs it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.load import load_data
from ptyacc.data.stream import HostRows, StreamedStore, mean_of_sample
from ptyacc.errors import ConfigError
from ptyacc.physics.deviance import deviance_sums, saturated_sums


class Step(NamedTuple):
    """What one process computes in one step."""

    indices: torch.Tensor  # (b,) long: this process's positions
    measured: torch.Tensor | None  # (b, K, K) float32: their measured patterns (None without a store)
    batch: torch.Tensor  # (B,) long: the global batch, every process's positions of this step


class EpochBatches(Dataset):
    """Index batches for one epoch at a time; call ``set_epoch`` before iterating.

    positions_px: (N, 2) probe centres, used by ``compact`` grouping to form spatial clusters.
    shards: optional partition of range(N) into ``world_size`` arrays (see ``spatial_shards``).
    store: answers ``measured(indices)`` with the patterns of those positions (``PatternStore``).
    left_out: positions never drawn (the validation positions, ``ptyacc/reconstruction/validation.py``).
    Items are ``Step`` records.
    """

    def __init__(self, positions_px: np.ndarray, batch_size: int, world_size: int = 1,
                 grouping: str = "random", seed: int = 0, shards: list[np.ndarray] | None = None,
                 store=None, left_out: np.ndarray | None = None) -> None:
        self.members = np.arange(len(positions_px))
        if left_out is not None and len(left_out):
            self.members = np.setdiff1d(self.members, left_out)
            shards = None if shards is None else [np.setdiff1d(shard, left_out) for shard in shards]
        n = len(self.members)
        if n < world_size:
            raise ValueError(f"{n} positions cannot be shared by {world_size} processes")
        if shards is not None and len(shards) != world_size:
            raise ValueError(f"{len(shards)} shards for {world_size} processes")
        self.positions_px = np.asarray(positions_px, dtype=np.float64)
        self.world_size = world_size
        self.grouping = grouping
        self.seed = seed
        self.shards = shards
        self.store = store
        batch_size = max(min(batch_size, n), world_size)
        n_steps = max(n // batch_size, 1)
        if shards is not None:  # every process needs at least one position per step
            n_steps = min(n_steps, min(len(s) for s in shards))
        self.n_steps = n_steps
        self.epoch = 0
        self._pieces = self._make_pieces()
        self._told = False  # whether the store has this epoch's plan and no step of it was taken yet

    def set_epoch(self, epoch: int) -> None:
        """The epoch to iterate; the store is told its steps once. The engine and Accelerate's
        loader both set the epoch before an iteration; telling a streaming store twice would drop
        its reads ahead and read them again. An epoch taken again (an iteration retried after a
        non-finite loss) is told again."""
        if epoch != self.epoch:
            self.epoch = epoch
            self._pieces = self._make_pieces()
            self._told = False
        if self.store is not None and not self._told:  # the store may read the epoch's patterns ahead
            self.store.expect(self._pieces)
            self._told = True

    def global_batches(self) -> list[np.ndarray]:
        """The epoch's global batches (arrays of position indices)."""
        return [np.concatenate(step) for step in self._pieces]

    def __len__(self) -> int:
        return self.n_steps * self.world_size

    def __getitem__(self, item: int) -> Step:
        self._told = False
        pieces = self._pieces[item // self.world_size]
        indices = torch.from_numpy(pieces[item % self.world_size])
        measured = self.store.measured(indices) if self.store is not None else None
        batch = torch.from_numpy(np.concatenate(pieces))
        device = getattr(self.store, "device", None)
        if device is None:
            return Step(indices, measured, batch)
        # on the device already: Accelerate's loader would copy them with non_blocking=False, a wait for the GPU each
        return Step(queued_copy(indices, device), measured, queued_copy(batch, device))

    def _make_pieces(self) -> list[list[np.ndarray]]:
        """pieces[step][process]: random or spatially compact groups, steps in random order."""
        rng = np.random.default_rng([self.seed, self.epoch])
        if self.shards is None:
            batches = self._groups(self.members, rng)
            return [np.array_split(batch, self.world_size) for batch in batches]
        per_process = [self._groups(np.asarray(shard), rng) for shard in self.shards]
        return [list(step) for step in zip(*per_process, strict=True)]

    def _groups(self, members: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        """``members`` split into n_steps groups whose sizes differ by at most one, shuffled."""
        sizes = _even_sizes(len(members), self.n_steps)
        if self.grouping == "random":
            order = members[rng.permutation(len(members))]
        else:
            order = members[_compact_order(self.positions_px[members], sizes)]
        groups = _cut_sorted(order, sizes)
        return [groups[i] for i in rng.permutation(len(groups))]


def spatial_shards(positions_px: np.ndarray, world_size: int) -> list[np.ndarray]:
    """A fixed partition of the positions into ``world_size`` spatially compact shards whose
    sizes differ by at most one (sorted indices)."""
    return spatial_bisection(positions_px, world_size)[0]


class Cut(NamedTuple):
    """One cut of the recursive bisection behind ``spatial_shards``: the positions were sorted
    along ``axis`` (0 = y, 1 = x) and split between ``last_first`` and ``first_second`` (indices
    of the first part's last and the second part's first position along that axis); ``first``
    and ``second`` are the cuts inside each part (None for a part that is one shard)."""

    axis: int
    last_first: int
    first_second: int
    first: Cut | None
    second: Cut | None


def spatial_bisection(positions: np.ndarray, world_size: int) -> tuple[list[np.ndarray], Cut | None]:
    """``spatial_shards`` and the cuts that made them; shard r is the r-th leaf of the cut tree,
    first parts before second parts (the object tiles of ``runtime.shard_object`` follow it)."""
    points = np.asarray(positions, dtype=np.float64)
    sizes = _even_sizes(len(points), world_size)
    order, cut = _bisect(points, np.arange(len(points)), sizes)
    return _cut_sorted(order, sizes), cut


def _even_sizes(n: int, parts: int) -> np.ndarray:
    """``parts`` sizes summing to ``n`` that differ by at most one, the larger first."""
    sizes = np.full(parts, n // parts)
    sizes[: n % parts] += 1
    return sizes


def _cut_sorted(order: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """``order`` cut into consecutive runs of ``sizes``, each run sorted."""
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [np.sort(order[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _compact_order(points: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices ordered so that consecutive runs of ``sizes`` form spatial clusters (``_bisect``)."""
    return _bisect(points, np.arange(len(points)), sizes)[0]


def _bisect(points: np.ndarray, members: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, Cut | None]:
    """``members`` (indices into ``points``) ordered so that consecutive runs of ``sizes`` form
    spatial clusters: recursive bisection across the wider extent, each cut placed so both
    halves hold whole groups; and the tree of those cuts."""
    if len(sizes) == 1:
        return members, None
    half = len(sizes) // 2
    n_first = int(sizes[:half].sum())
    axis = int(np.argmax(np.ptp(points[members], axis=0)))
    ordered = members[np.argsort(points[members, axis], kind="stable")]
    first, second = ordered[:n_first], ordered[n_first:]
    first_order, first_cut = _bisect(points, first, sizes[:half])
    second_order, second_cut = _bisect(points, second, sizes[half:])
    cut = Cut(axis, int(first[-1]), int(second[0]), first_cut, second_cut) if len(first) and len(second) else None
    return np.concatenate([first_order, second_order]), cut


@dataclass(frozen=True)
class ShardPlan:
    """Which positions' patterns each of ``world`` processes holds.

    shards: one sorted array of position indices per process (``runtime.shard_data``: spatially
    compact regions), or None when every process holds every pattern (replicated).
    cut: the bisection that made the shards (``runtime.shard_object`` cuts the object along it).
    """

    world: int
    rank: int
    shards: tuple[np.ndarray, ...] | None = None
    cut: Cut | None = None

    @classmethod
    def spatial(cls, positions_A: np.ndarray, world: int, rank: int) -> ShardPlan:
        if len(positions_A) < world:
            raise ConfigError(f"runtime.shard_data: {len(positions_A)} positions cannot be shared by {world} processes "
                              f"(each needs at least one); use at most {len(positions_A)} processes")
        shards, cut = spatial_bisection(positions_A, world)
        return cls(world, rank, tuple(shards), cut)

    @property
    def held(self) -> np.ndarray | None:
        """The positions whose patterns this process holds; None = all of them."""
        return None if self.shards is None else self.shards[self.rank]

    def batches(self, positions_px: np.ndarray, batch_size: int, grouping: str, seed: int,
                store: PatternStore | None = None, left_out: np.ndarray | None = None) -> EpochBatches:
        """The steps of every epoch: each process's positions drawn from what it holds, except
        the positions ``left_out``."""
        shards = list(self.shards) if self.shards is not None else None
        return EpochBatches(positions_px, batch_size, self.world, grouping, seed, shards, store, left_out)

    def evaluation_share(self, n_positions: int) -> np.ndarray:
        """The positions this process evaluates when all of them are evaluated once (deviance):
        its own shard, or every W-th position when replicated."""
        return self.held if self.held is not None else np.arange(n_positions)[self.rank::self.world]


def load_planned(config, world: int, rank: int, data: PtychoData | None = None,
                 device: torch.device | str = "cpu", judge=None) -> tuple[PtychoData, ShardPlan]:
    """The dataset as this process needs it, and the plan it was cut by: with
    ``runtime.shard_data`` only this process's spatial share of the patterns is read (or kept,
    for ``data`` given whole); ``data.hold`` places them for a run on ``device``; ``judge`` chooses among the
    orientations the data leave open (``load.load_data``)."""
    if not (config.runtime.shard_data or config.runtime.shard_object):  # shard_object implies shard_data
        return (data if data is not None else load_data(config, device=device, judge=judge)), ShardPlan(world, rank)
    plans: list[ShardPlan] = []

    def keep(positions_A: np.ndarray) -> np.ndarray:
        plans.append(ShardPlan.spatial(positions_A, world, rank))
        return plans[-1].held

    if data is None:
        data = load_data(config, keep, device, judge)
    elif data.pattern_rows is None:
        data = keep_only(data, keep)
    return data, plans[0] if plans else ShardPlan.spatial(data.positions_A, world, rank)


def pattern_store(data: PtychoData, plan: ShardPlan, device: torch.device | str, hold: str = "device"
                  ) -> PatternStore | StreamedStore:
    """The store of the patterns this process holds: on the device (``PatternStore``), or
    streamed to it (``StreamedStore``) when ``load_data`` left them in host memory or in the file,
    or when ``hold`` is host for patterns given in memory (simulated or passed in)."""
    if data.streamed is not None:
        return StreamedStore(data.streamed.read, plan.held, data.n_patterns, device, plan.rank)
    if hold == "host":
        held = plan.held if plan.held is not None else np.arange(data.n_patterns)
        return StreamedStore(HostRows(data.patterns.numpy(), held), plan.held, data.n_patterns, device, plan.rank)
    return PatternStore(data.patterns, plan.held, data.n_patterns, device)


class PatternStore:
    """The measured patterns (H, K, K) this process holds, on its device, looked up by position
    index (``data.hold: device``; ``stream.StreamedStore`` answers the same ``measured`` for
    patterns held elsewhere)."""

    holds_on_device = True

    def __init__(self, patterns: torch.Tensor, held: np.ndarray | None, n_positions: int,
                 device: torch.device | str = "cpu") -> None:
        self.patterns = patterns.to(device)
        self.device: torch.device = self.patterns.device
        self.held = np.arange(n_positions) if held is None else np.asarray(held)
        self._row_of: torch.Tensor | None = None
        if held is not None:  # position index -> row; one past the last row (an IndexError) for patterns held elsewhere
            self._row_of = torch.full((n_positions,), len(self.held), dtype=torch.long, device=device)
            self._row_of[torch.as_tensor(self.held, device=device)] = torch.arange(len(self.held), device=device)

    def expect(self, pieces: list[list[np.ndarray]]) -> None:
        """The coming epoch's steps (see ``StreamedStore.expect``): nothing to read ahead here."""

    def measured(self, indices: torch.Tensor) -> torch.Tensor:
        """(b, K, K) patterns of the positions ``indices`` (b,), which this process must hold."""
        indices = queued_copy(indices, self.device)
        return self.patterns[indices] if self._row_of is None else self.patterns[self._row_of[indices]]

    def mean_of_sample(self, predict: Callable[[torch.Tensor], torch.Tensor], most: int = 128
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean measured pattern and mean prediction over a seeded random sample of up to ``most``
        held positions (``stream.mean_of_sample``)."""
        return mean_of_sample(self, predict, most)


def queued_copy(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``values`` (host memory) on ``device``; to a GPU through pinned memory with
    ``non_blocking``: queued on the stream, the host goes on (a plain copy from pageable
    memory waits for the GPU to finish all its queued work, once per step)."""
    pinned = values.pin_memory() if device.type == "cuda" and values.device.type == "cpu" else values
    return pinned.to(device, non_blocking=True)


def sample_statistics(store: PatternStore | StreamedStore, mask: torch.Tensor | None = None,
                      most: int = 128, n_positions: int | None = None) -> tuple[bool, float, torch.Tensor | None, int]:
    """From a seeded random sample of up to ``most`` of the scan's ``n_positions`` patterns (None: the
    ones ``store`` holds, all of them on one process), the same positions on any number of processes,
    those that ``store`` holds: whether they are counts (every value a whole number, none negative) and
    the brightest pixel of their mean pattern, both on the pixels of the detector ``mask`` (K, K) bool,
    if any; their mean pattern (K, K) float64, every pixel, from which the initial probe's aperture edge
    and the dark field's floor are read; and how many they are (``over_processes`` weighs each
    process's mean by it). (True, 0.0, None, 0) when ``store`` holds none of them."""
    held = np.asarray(store.held)
    n = len(held) if n_positions is None else n_positions
    chosen = np.sort(np.random.default_rng(0).choice(n, size=min(most, n), replace=False))
    mine = held[chosen] if n_positions is None else chosen[np.isin(chosen, held)]
    if not len(mine):
        return True, 0.0, None, 0
    patterns = store.measured(torch.as_tensor(mine, device=store.device))
    mean_pattern = patterns.mean(0, dtype=torch.float64)
    if mask is not None:  # a bad pixel's value may be anything
        patterns = patterns[:, mask.to(patterns.device)]
    counts = bool(torch.equal(patterns, patterns.round())) and bool(patterns.min() >= 0)
    counted = mean_pattern if mask is None else mean_pattern[mask.to(mean_pattern.device)]
    return counts, float(counted.max()), mean_pattern, len(mine)


def over_processes(data: PtychoData, statistics: tuple[bool, float, torch.Tensor | None, int], sharded: bool,
                   accelerator, with_pattern: bool) -> tuple[float, float, float, torch.Tensor | None]:
    """What every process must agree on, from its own patterns and ``sample_statistics``, summed in
    one collective where each holds its own share (``sharded``): (mean counts per pattern, the
    probe's scale; how many processes' samples are not counts, 0 if all are; the brightest pixel of
    the sample's mean pattern on the detector mask's pixels; where ``with_pattern``, that mean pattern,
    from which the initial probe's aperture edge and the dark field's floor are read, else None). The
    sample is the same positions on any number of processes, so the mean pattern and what is read from
    it are the one process's, to the order of a float64 sum."""
    counts, peak, mean_pattern, sampled = statistics
    shards = accelerator.num_processes if sharded else 1
    if shards == 1:
        return (data.counts_total / data.n_patterns, float(not counts), peak,
                mean_pattern.cpu() if with_pattern and mean_pattern is not None else None)
    k = data.detector_px
    summed = mean_pattern * sampled if mean_pattern is not None else torch.zeros(k, k, dtype=torch.float64)
    sums = torch.cat([torch.tensor([float(data.counts_total), float(not counts), float(sampled)], dtype=torch.float64),
                      summed.cpu().flatten()])
    sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
    counts_total, not_counts, sampled = (float(value) for value in sums[:3])
    mean = sums[3:].reshape(k, k) / max(sampled, 1.0)
    counted = mean if data.mask is None else mean[data.mask.to(mean.device)]
    return counts_total / data.n_patterns, not_counts, float(counted.max()), mean if with_pattern else None


def held_mean_over_processes(data: PtychoData, sharded: bool, accelerator) -> torch.Tensor:
    """(K, K) float64 mean of every held pattern: where each process holds its own share (``sharded``), the shares'
    sums and counts added in one collective, so that every process starts from the same mean (the one process's, to
    the order of a float64 sum); else the process's own held mean, which is all of them."""
    if not sharded or accelerator.num_processes == 1:
        return data.held_mean_pattern()
    k = data.detector_px
    sums = torch.cat([torch.tensor([float(data.n_held)], dtype=torch.float64),
                      (data.held_mean_pattern() * data.n_held).flatten()])
    sums = accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()
    return sums[1:].reshape(k, k) / max(float(sums[0]), 1.0)


@torch.no_grad()
def poisson_deviance_sums(model: Callable[[torch.Tensor], torch.Tensor], store: PatternStore | StreamedStore,
                          indices: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """For a model (``PtychoModel``: its ``detector_mask``, its predicted patterns of position indices),
    (sum over counted pixels of the Poisson deviance terms, number of pixel values >= 1, sum of
    the data-only term poisson_nll(M, M) that the loss leaves out, sum of the counts M) of the model's
    prediction for ``indices`` against their patterns, in chunks (``deviance_sums``); divided by half the
    count the deviance is ~1 for a model at the noise level. All over the pixels the mask keeps."""
    total = torch.zeros(4, dtype=torch.float64, device=indices.device)
    mask = model.detector_mask
    for start in range(0, len(indices), chunk):
        part = indices[start:start + chunk]
        measured = store.measured(part).double()  # once: the sums below take it as it is
        counts = (measured * mask).sum() if mask is not None else measured.sum()
        total += torch.cat([deviance_sums(model(part), measured, mask), saturated_sums(measured, mask)[:1],
                            counts[None]])
    return total
