"""Token shards as the engine's loader: one epoch at a time, positioned by the step alone.

`TokenShards` (trainer.data.tokens) knows the one global order of every epoch and which
rows of each global batch this host feeds. This adapter gives it the loader surface the
engine's data path reads (`len`, `batch_size`, `set_epoch`) plus `seek`: a resumed run
starts its first epoch at the checkpoint's batch directly, on any number of hosts,
instead of replaying the batches already done.
"""
from __future__ import annotations

from typing import Any, Iterator


def is_token_shards(data: Any) -> bool:
    """`data` is a TokenShards dataset (or anything with its binding protocol)."""
    return callable(getattr(data, "bind", None)) and callable(getattr(data, "epoch", None))


class ShardsLoader:
    def __init__(self, shards: Any, process_index: int, process_count: int, data_parallel_size: int):
        """Binds `shards` to this host (a UserError when the global batch does not divide)."""
        shards.bind(process_index, process_count, data_parallel_size)
        self.shards = shards
        self.batch_size = shards.global_batch_size // process_count
        """Rows this host feeds per micro-step."""
        self._epoch, self._start = 1, 0

    def __len__(self) -> int:
        return len(self.shards)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads, from its first global batch."""
        self._epoch, self._start = epoch, 0

    def seek(self, batch: int) -> None:
        """Start the current epoch's next iteration at global batch `batch` (a resume)."""
        self._start = batch

    def __iter__(self) -> Iterator[Any]:
        return iter(self.shards.epoch(self._epoch, self._start))
