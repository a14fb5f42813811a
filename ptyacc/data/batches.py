"""The batches dataset: which positions each process uses in each step of each epoch.

Item ``j`` of an epoch is the share of global batch ``j // W`` that belongs to process
``j % W``, where W is the number of processes. Accelerate's data-loader sharding with batch
size 1 hands item j to process j % W, so every process gets its own share of every global
batch, all processes run the same number of steps (the length is a multiple of W), and every
position is used exactly once per epoch: no padding duplicates and no drops.
The order comes from ``seed`` and ``epoch`` alone, so it is identical on all processes and
changes every epoch.
"""

import numpy as np
import torch
from torch.utils.data import Dataset


class EpochBatches(Dataset):
    """Index batches for one epoch at a time; call ``set_epoch`` before iterating.

    positions_px: (N, 2) probe centres, used by ``compact`` grouping to form spatial clusters.
    """

    def __init__(self, positions_px: np.ndarray, batch_size: int, world_size: int = 1,
                 grouping: str = "random", seed: int = 0) -> None:
        n = len(positions_px)
        if n < world_size:
            raise ValueError(f"{n} positions cannot be shared by {world_size} processes")
        self.positions_px = np.asarray(positions_px, dtype=np.float64)
        self.world_size = world_size
        self.grouping = grouping
        self.seed = seed
        batch_size = max(min(batch_size, n), world_size)
        n_batches = max(n // batch_size, 1)
        # Split N into n_batches global batches whose sizes differ by at most one, each >= W.
        self.batch_sizes = np.full(n_batches, n // n_batches)
        self.batch_sizes[: n % n_batches] += 1
        self.epoch = 0
        self._batches = self._make_batches()

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self._batches = self._make_batches()

    def global_batches(self) -> list[np.ndarray]:
        """The epoch's global batches (arrays of position indices)."""
        return self._batches

    def __len__(self) -> int:
        return len(self.batch_sizes) * self.world_size

    def __getitem__(self, item: int) -> tuple[torch.Tensor, int]:
        """(this process's share of the global batch, the global batch size)."""
        batch = self._batches[item // self.world_size]
        return torch.from_numpy(np.array_split(batch, self.world_size)[item % self.world_size]), len(batch)

    def _make_batches(self) -> list[np.ndarray]:
        """The epoch's global batches: random or spatially compact groups, in random order."""
        rng = np.random.default_rng([self.seed, self.epoch])
        n = len(self.positions_px)
        if self.grouping == "random":
            order = rng.permutation(n)
        else:
            order = _compact_order(self.positions_px, self.batch_sizes)
        bounds = np.concatenate([[0], np.cumsum(self.batch_sizes)])
        batches = [np.sort(order[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        return [batches[i] for i in rng.permutation(len(batches))]


def _compact_order(points: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices ordered so that consecutive runs of ``sizes`` form spatial clusters: recursive
    bisection across the wider extent, each cut placed so both halves hold whole groups."""
    if len(sizes) == 1:
        return np.arange(len(points))
    half = len(sizes) // 2
    n_first = int(sizes[:half].sum())
    axis = int(np.argmax(np.ptp(points, axis=0)))
    order = np.argsort(points[:, axis], kind="stable")
    first, second = order[:n_first], order[n_first:]
    return np.concatenate([first[_compact_order(points[first], sizes[:half])],
                           second[_compact_order(points[second], sizes[half:])]])
