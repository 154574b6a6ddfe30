"""Automatic data sharding across processes (hosts), keeping the user's order and seed.

On one host, SPMD shards each global batch across the devices inside the compiled
graph, so the loader is left untouched. With several processes (a multi-host pod
slice), each process must load only its slice: the engine re-creates the loader with
`ShardedSampler` over the user's sampler, so a user never writes a DistributedSampler,
and a sampler the user chose (weighted, custom) is kept and sharded, not replaced.
"""
from __future__ import annotations

import math
from typing import Iterator, Sized

import torch
from torch.utils.data import DataLoader, RandomSampler, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler


class ShardedSampler(Sampler[int]):
    """Every `count`-th index of the inner sampler's order, starting at `index`.

    The inner order is padded by wrapping around so every process sees the same number
    of samples (equal step counts are required: a process that stops early would hang
    the others). `set_epoch` reseeds a shuffling inner sampler identically on every
    process, so the slices stay disjoint.
    """

    def __init__(self, inner: Sampler, index: int, count: int, seed: int = 0):
        assert 0 <= index < count, (index, count)
        self.inner, self.index, self.count, self.seed = inner, index, count, seed
        self.epoch = 0
        if isinstance(inner, RandomSampler) and inner.generator is None:
            inner.generator = torch.Generator()  # one object for the run: checkpoints capture it

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.inner, "set_epoch"):
            self.inner.set_epoch(epoch)
        elif isinstance(self.inner, RandomSampler):
            self.inner.generator.manual_seed(self.seed + epoch)  # the same order on every process

    def __len__(self) -> int:
        return math.ceil(len(self.inner) / self.count)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[int]:
        order = list(self.inner)
        total = len(self) * self.count
        order += order[: total - len(order)]
        return iter(order[self.index : total : self.count])


def shard_loader(loader: DataLoader, index: int, count: int, seed: int) -> DataLoader:
    """The same loader, loading only this process's slice when there are several processes."""
    if count == 1 or isinstance(loader.sampler, (DistributedSampler, ShardedSampler)):
        return loader
    if loader.batch_sampler is not None and not _default_batch_sampler(loader):
        raise ValueError(
            "this DataLoader has a custom batch_sampler, which the engine cannot shard across "
            f"{count} processes. Use a sampler= (it will be sharded) or shard it yourself by "
            "process index."
        )
    sampler = ShardedSampler(loader.sampler, index, count, seed)
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
    )


def _default_batch_sampler(loader: DataLoader) -> bool:
    from torch.utils.data import BatchSampler

    return type(loader.batch_sampler) is BatchSampler and isinstance(
        loader.sampler, (RandomSampler, SequentialSampler, Sized)
    )
