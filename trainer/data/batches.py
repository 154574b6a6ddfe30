"""Host-side batch handling: type checks, fixed shapes, and the padding mask.

XLA compiles one graph per input shape, so every batch the device sees has the same
shape: a ragged last batch is padded to full size by repeating its own rows, and a mask
(1 = real row, 0 = padding) travels with every batch so the engine's reductions ignore
the padding. The mask is always sent, so padded and full batches share one graph.

torch_xla moves only exact `torch.Tensor`s and silently passes anything else through;
we refuse what would silently stay on the host, naming where it is in the batch.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

HOST_SCALARS = (int, float, str, bool, bytes, type(None))


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any], path: str = "batch") -> Any:
    """Apply `fn` to every tensor in a nested batch; keep host scalars; refuse other types."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, HOST_SCALARS):
        return batch
    if isinstance(batch, dict):
        return type(batch)((k, map_tensors(v, fn, f"{path}[{k!r}]")) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(getattr(batch, f), fn, f"{path}.{f}") for f in batch._fields))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(v, fn, f"{path}[{i}]") for i, v in enumerate(batch))
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: map_tensors(getattr(batch, f.name), fn, f"{path}.{f.name}")
            for f in dataclasses.fields(batch)
            if f.init
        }
        return dataclasses.replace(batch, **changes)
    raise TypeError(
        f"{path} is a {type(batch).__module__}.{type(batch).__qualname__}, which cannot go to an "
        "XLA device (torch_xla would silently leave it on the host). Batches may hold tensors, "
        "ints, floats, strings and None, nested in dicts, lists, tuples, namedtuples and "
        "dataclasses. Fix: convert it in your dataset or collate_fn, e.g. torch.as_tensor(x)."
    )


def tensors_of(batch: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(batch, lambda t: found.append(t) or t)
    return found


def batch_size_of(batch: Any) -> int:
    """The leading dimension shared by the batch's tensors (the first tensor's)."""
    tensors = [t for t in tensors_of(batch) if t.dim() > 0]
    if not tensors:
        raise TypeError("a batch holds no tensor with a batch dimension; the engine cannot shard or pad it.")
    return tensors[0].shape[0]


def pad_batch(batch: Any, size: int, full_size: int) -> Any:
    """Repeat the batch's own rows up to `full_size` (tensors whose dim 0 is the batch)."""
    index = torch.arange(full_size) % size

    def pad(t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, index) if t.dim() > 0 and t.shape[0] == size else t

    return map_tensors(batch, pad)


class FixedShapeBatches:
    """Yields `(batch, mask)` with every batch at `full_size` rows (mask on the host).

    `full_size` is the loader's batch size (or its first batch's size). With
    `last_batch="drop"` a short batch is skipped instead of padded.
    """

    def __init__(self, loader: Any, last_batch: str, full_size: int | None = None):
        self.loader = loader
        self.last_batch = last_batch
        self.full_size = full_size or getattr(loader, "batch_size", None)

    def __len__(self) -> int:
        n = len(self.loader)
        if self.last_batch == "drop" and self._ragged_tail():
            n -= 1
        return n

    def _total(self) -> int | None:
        """Samples per epoch (this process's share), or None when the loader cannot say."""
        dataset = getattr(self.loader, "dataset", None)
        sampler = getattr(self.loader, "sampler", None)
        try:
            return len(sampler) if sampler is not None else len(dataset)
        except TypeError:
            return None

    def _ragged_tail(self) -> bool:
        total = self._total()
        return (total is not None and bool(self.full_size) and not getattr(self.loader, "drop_last", False)
                and total % self.full_size != 0)

    def rows_of(self, index: int) -> int:
        """Real (unpadded) rows of batch `index` of an epoch, known before it is loaded.

        Gradient accumulation weighs each batch of a window by it, so that a window's loss is
        the mean over its real rows, exactly as one batch of the whole window would be.
        """
        total, full = self._total(), self.full_size
        if total is None or not full:
            return full or 0
        return max(0, min(full, total - index * full))

    def __iter__(self):
        for batch in self.loader:
            size = batch_size_of(batch)
            full = self.full_size = self.full_size or size
            if size > full:
                raise ValueError(f"a batch of {size} rows is larger than the first batch ({full}); batches must not grow.")
            mask = torch.zeros(full, dtype=torch.float32)
            mask[:size] = 1.0
            if size < full:
                if self.last_batch == "drop":
                    continue
                batch = pad_batch(batch, size, full)
            yield batch, mask
