"""Who holds which patterns: the shard plan, worked out once per run, and the pattern store
that answers a step's ``measured(indices)``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ptyacc.data.batches import Cut, EpochBatches, spatial_bisection
from ptyacc.data.dataset import PtychoData, keep_only
from ptyacc.data.load import load_data
from ptyacc.data.stream import HostRows, StreamedStore, mean_of_sample
from ptyacc.errors import ConfigError


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
                 device: torch.device | str = "cpu") -> tuple[PtychoData, ShardPlan]:
    """The dataset as this process needs it, and the plan it was cut by: with
    ``runtime.shard_data`` only this process's spatial share of the patterns is read (or kept,
    for ``data`` given whole); ``data.hold`` places them for a run on ``device``."""
    if not (config.runtime.shard_data or config.runtime.shard_object):  # shard_object implies shard_data
        return (data if data is not None else load_data(config, device=device)), ShardPlan(world, rank)
    plans: list[ShardPlan] = []

    def keep(positions_A: np.ndarray) -> np.ndarray:
        plans.append(ShardPlan.spatial(positions_A, world, rank))
        return plans[-1].held

    if data is None:
        data = load_data(config, keep, device)
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
        self.held = np.arange(n_positions) if held is None else np.asarray(held)
        self._row_of: torch.Tensor | None = None
        if held is not None:  # position index -> row; one past the last row (an IndexError) for patterns held elsewhere
            self._row_of = torch.full((n_positions,), len(self.held), dtype=torch.long, device=device)
            self._row_of[torch.as_tensor(self.held, device=device)] = torch.arange(len(self.held), device=device)

    def expect(self, pieces: list[list[np.ndarray]]) -> None:
        """The coming epoch's steps (see ``StreamedStore.expect``): nothing to read ahead here."""

    def measured(self, indices: torch.Tensor) -> torch.Tensor:
        """(b, K, K) patterns of the positions ``indices`` (b,), which this process must hold."""
        indices = indices.to(self.patterns.device)
        return self.patterns[indices] if self._row_of is None else self.patterns[self._row_of[indices]]

    @property
    def device(self) -> torch.device:
        return self.patterns.device

    def mean_of_sample(self, predict: Callable[[torch.Tensor], torch.Tensor], most: int = 128
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean measured pattern and mean prediction over a seeded random sample of up to ``most``
        held positions (``stream.mean_of_sample``)."""
        return mean_of_sample(self, predict, most)
