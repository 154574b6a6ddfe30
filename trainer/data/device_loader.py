"""Host-to-device copies in a background thread, so they overlap the step that runs.

The same idea as torch_xla's MpDeviceLoader (measured here: 0.77x the step time of
`.to()` + sync), plus what it lacks: a mask travels with every batch, batches are
type-checked, and under SPMD every tensor is sharded on its batch dimension over the
mesh's batch axes whatever its rank (MpDeviceLoader's one spec fits one rank only).
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterable, Iterator

import torch

from trainer.runtime import backend
from trainer.data.batches import map_tensors

_DONE = object()


class BatchTransfer:
    """Moves one host batch (a nested structure) to the device, sharded when SPMD."""

    def __init__(self, device: Any, mesh: Any | None, minibatch: bool, cast: Callable[[torch.Tensor], torch.Tensor]):
        self.device, self.mesh, self.minibatch, self.cast = device, mesh, minibatch, cast
        self._specs: dict[int, Any] = {}

    def _spec(self, rank: int) -> Any:
        """A ShardingSpec splitting dim 0 over the batch axes, replicating the rest (one per rank)."""
        if rank not in self._specs:
            from trainer.parallel.sharding import batch_sharding

            self._specs[rank] = batch_sharding(self.mesh, rank, self.minibatch) if rank else None
        return self._specs[rank]

    def __call__(self, batch: Any) -> Any:
        host = map_tensors(batch, self.cast)
        tensors: list[torch.Tensor] = []
        map_tensors(host, lambda t: tensors.append(t) or t)
        moved: list[Any] = [None] * len(tensors)
        by_rank: dict[int, list[int]] = {}
        for i, t in enumerate(tensors):
            by_rank.setdefault(t.dim() if self.mesh is not None else -1, []).append(i)
        for rank, positions in by_rank.items():
            spec = self._spec(rank) if rank > 0 else None
            group = backend.send_to_device([tensors[i] for i in positions], self.device, spec)
            for i, t in zip(positions, group):
                moved[i] = t
        it = iter(moved)
        return map_tensors(host, lambda _: next(it))


class DeviceBatch(tuple):
    """`(device_batch, device_mask)`, plus `rows`: how many rows are real, known on the host
    (so the loop never reads the mask back from the device to learn it)."""

    rows: int

    def __new__(cls, pair: tuple, rows: int) -> "DeviceBatch":
        item = super().__new__(cls, pair)
        item.rows = rows
        return item


class DeviceLoader:
    """Iterates `DeviceBatch`es `(device_batch, device_mask)` while a thread prepares the next ones.

    `prefetch` bounds how many batches wait on the device (memory); errors raised while
    loading (a bad type, a failing dataset) are re-raised in the training loop.
    """

    def __init__(self, batches: Iterable[tuple[Any, torch.Tensor]], transfer: BatchTransfer, prefetch: int = 2):
        self.batches, self.transfer, self.prefetch = batches, transfer, prefetch

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for batch, mask in self.batches:
                    if not put(DeviceBatch(self.transfer((batch, mask)), int(mask.sum()))):
                        return
                put(_DONE)
            except BaseException as exc:  # surfaced in the consumer, with its traceback
                put(exc)

        worker = threading.Thread(target=produce, name="device-loader", daemon=True)
        worker.start()
        try:
            while True:
                item = ready.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join(timeout=5)
