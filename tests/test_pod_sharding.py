"""Four simulated pod workers load disjoint slices that cover the data (run: `pytest tests/test_pod_sharding.py`).

`invoke pod` gives each worker its index and the count; the engine shards its loader with
`trainer.data.sampling`. Here four "workers" are four samplers/loaders in one process.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset

from trainer.data.sampling import ShardedSampler, shard_loader

WORKERS = 4


@pytest.mark.parametrize("size", [40, 1797])  # 1797: the digits set, not a multiple of 4
@pytest.mark.parametrize("shuffle", [False, True])
def test_four_workers_cover_everything_once_up_to_padding(size: int, shuffle: bool) -> None:
    data = range(size)
    for epoch in (0, 1):
        slices = []
        for i in range(WORKERS):
            inner = RandomSampler(data) if shuffle else SequentialSampler(data)
            sampler = ShardedSampler(inner, i, WORKERS, seed=7)
            sampler.set_epoch(epoch)
            slices.append(list(sampler))
        per_worker = math.ceil(size / WORKERS)
        assert [len(s) for s in slices] == [per_worker] * WORKERS, "equal steps, or collectives hang"
        everything = [x for s in slices for x in s]
        assert set(everything) == set(data), "complete coverage"
        padding = per_worker * WORKERS - size
        assert len(everything) - len(set(everything)) == padding, "disjoint except the wrap-around padding"
        if padding == 0:
            assert all(set(a).isdisjoint(b) for n, a in enumerate(slices) for b in slices[n + 1 :])


def test_sharded_loaders_split_batches_between_workers() -> None:
    dataset = TensorDataset(torch.arange(64))
    seen = []
    for i in range(WORKERS):
        loader = shard_loader(DataLoader(dataset, batch_size=4, shuffle=True), i, WORKERS, seed=3)
        # Without set_epoch each worker's RandomSampler would draw its own permutation
        # from its own global RNG state; set_epoch gives all workers the same one.
        loader.sampler.set_epoch(1)
        batches = [b[0].tolist() for b in loader]
        assert len(batches) == 4
        seen.append(sorted(x for b in batches for x in b))
    assert sorted(x for s in seen for x in s) == list(range(64))
