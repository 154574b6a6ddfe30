"""Automatic sharding across processes. `pytest tests/test_sampling.py`."""
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset, WeightedRandomSampler

from trainer.sampling import ShardedSampler, shard_loader

DATA = TensorDataset(torch.arange(103))


def _slices(inner_factory, count=4, epoch=0):
    slices = []
    for index in range(count):
        sampler = ShardedSampler(inner_factory(), index, count, seed=7)
        sampler.set_epoch(epoch)
        slices.append(list(sampler))
    return slices


def test_four_processes_cover_the_data_disjointly_and_completely():
    slices = _slices(lambda: SequentialSampler(DATA))
    assert len({len(s) for s in slices}) == 1  # equal step counts on every process
    flat = [i for s in slices for i in s]
    assert set(flat) == set(range(103))
    assert len(flat) - len(set(flat)) == 4 * 26 - 103  # only the wrap-around padding repeats


def test_shuffled_slices_are_disjoint_and_change_per_epoch():
    slices0 = _slices(lambda: RandomSampler(DATA))
    slices1 = _slices(lambda: RandomSampler(DATA), epoch=1)
    assert set().union(*map(set, slices0)) == set(range(103))
    assert sum(len(set(a) & set(b)) for i, a in enumerate(slices0) for b in slices0[i + 1:]) <= 1
    assert slices0 != slices1


def test_single_process_loader_is_left_alone():
    loader = DataLoader(DATA, batch_size=8, shuffle=True)
    assert shard_loader(loader, 0, 1, seed=0) is loader


def test_user_sampler_is_kept_and_sharded():
    weights = torch.ones(103)
    loader = DataLoader(DATA, batch_size=8, sampler=WeightedRandomSampler(weights, 40))
    sharded = shard_loader(loader, 1, 4, seed=0)
    assert isinstance(sharded.sampler, ShardedSampler)
    assert isinstance(sharded.sampler.inner, WeightedRandomSampler)
    assert len(sharded.sampler) == 10 and sharded.batch_size == 8
