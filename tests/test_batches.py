"""The batches dataset: full cover, disjoint shares, same steps on every rank, seeded order."""

import numpy as np
import pytest

from ptyacc.data import EpochBatches


def grid(n_side: int) -> np.ndarray:
    return np.stack(np.meshgrid(np.arange(n_side), np.arange(n_side), indexing="ij"), -1).reshape(-1, 2) * 3.0


def shares_by_rank(batches: EpochBatches) -> list[list[np.ndarray]]:
    """What accelerate's sharding hands each rank: item j goes to rank j % W."""
    w = batches.world_size
    out: list[list[np.ndarray]] = [[] for _ in range(w)]
    for j in range(len(batches)):
        step = batches[j]
        out[j % w].append(step.indices.numpy())
        assert np.array_equal(step.batch.numpy(), batches.global_batches()[j // w])
    return out


@pytest.mark.parametrize("grouping", ["random", "compact"])
@pytest.mark.parametrize("n_side, batch, world", [(7, 10, 1), (7, 10, 2), (7, 10, 3), (5, 32, 2), (3, 100, 4)])
def test_every_position_once_per_epoch(n_side, batch, world, grouping):
    positions = grid(n_side)
    batches = EpochBatches(positions, batch, world, grouping, seed=5)
    for epoch in range(3):
        batches.set_epoch(epoch)
        shares = shares_by_rank(batches)
        assert len({len(s) for s in shares}) == 1  # same number of steps on every rank
        used = np.concatenate([np.concatenate(s) for s in shares])
        assert np.array_equal(np.sort(used), np.arange(len(positions)))  # full cover, no duplicates
        assert all(len(piece) >= 1 for s in shares for piece in s)  # no empty step


def test_order_depends_on_seed_and_epoch_only():
    positions = grid(6)
    a = EpochBatches(positions, 8, 2, "random", seed=1)
    b = EpochBatches(positions, 8, 2, "random", seed=1)
    a.set_epoch(2)
    b.set_epoch(1)
    b.set_epoch(2)
    assert all(np.array_equal(x, y) for x, y in zip(a.global_batches(), b.global_batches()))
    epoch2 = [x.copy() for x in a.global_batches()]
    a.set_epoch(3)
    assert not all(np.array_equal(x, y) for x, y in zip(a.global_batches(), epoch2))


def test_compact_batches_are_spatial_clusters():
    """Compact groups are much tighter than random ones (mean spread of a batch)."""
    positions = grid(12)

    def spread(grouping):
        batches = EpochBatches(positions, 16, 1, grouping, seed=0).global_batches()
        return np.mean([positions[b].std(axis=0).sum() for b in batches])

    assert spread("compact") < 0.5 * spread("random")


def test_spatial_shards_partition_into_compact_regions():
    from ptyacc.data import spatial_shards

    positions = grid(9)
    shards = spatial_shards(positions, 3)
    assert sorted(len(s) for s in shards) == [27, 27, 27]
    assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(81))
    spreads = [positions[s].std(axis=0).sum() for s in shards]
    assert max(spreads) < 0.75 * positions.std(axis=0).sum()


def test_sharded_batches_stay_inside_each_shard():
    from ptyacc.data import spatial_shards

    positions = grid(7)
    shards = spatial_shards(positions, 2)
    batches = EpochBatches(positions, 10, 2, "random", seed=1, shards=shards)
    for epoch in range(3):
        batches.set_epoch(epoch)
        per_rank = shares_by_rank(batches)
        for rank, pieces in enumerate(per_rank):
            assert set(np.concatenate(pieces)) == set(shards[rank])
        assert len(per_rank[0]) == len(per_rank[1])


def test_the_store_is_told_an_epochs_steps_once():
    """The engine and Accelerate's loader both set the epoch: the store hears the plan once (a
    streaming store told twice drops and repeats its reads ahead); again for a retried epoch."""
    import types

    told = []
    store = types.SimpleNamespace(expect=lambda pieces: told.append([p.copy() for step in pieces for p in step]),
                                  measured=lambda indices: None)
    batches = EpochBatches(np.zeros((20, 2)), batch_size=5, store=store)
    batches.set_epoch(0)
    batches.set_epoch(0)
    assert len(told) == 1
    steps = [batches[i] for i in range(len(batches))]
    batches.set_epoch(0)  # the same epoch again, after its steps were taken: a retry
    assert len(told) == 2 and all(np.array_equal(a, b) for a, b in zip(told[0], told[1], strict=True))
    batches.set_epoch(1)
    batches.set_epoch(1)
    assert len(told) == 3 and len(steps) == 4
