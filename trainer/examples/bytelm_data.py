"""Real offline text for the byte-level LM: the Python standard library's own sources.

Every machine and image with Python has them, so the job needs no download. The corpus is
the top-level `*.py` files of `sysconfig.get_paths()["stdlib"]`, sorted by name and read
as bytes: the same Python version gives the same bytes everywhere.

Split BY FILE with `zlib.crc32(name) % VAL_BUCKETS == 0` -> validation. A hash of the
name (not "every k-th file after sorting") keeps each file on its side when another
Python version adds or removes files, and never splits a file across both sides, so no
validation text can leak into training. `zlib.crc32` is used because Python's own
`hash()` of a str is salted per process.

Also here: the map-style datasets (fixed shapes, index -> window, so the engine's exact
resume can replay a seeded shuffle) and the bigram baseline the model must beat.
"""
from __future__ import annotations

import math
import sysconfig
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

VAL_BUCKETS = 10
"""About 1 file in 10 goes to validation (crc32 bucket 0)."""
BIGRAM_KS = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003)
"""Add-k smoothing values the baseline tries; it reports the best, i.e. the hardest bar."""


def is_validation_file(name: str) -> bool:
    return zlib.crc32(name.encode()) % VAL_BUCKETS == 0


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """Top-level .py files of the standard library, sorted by name (deterministic order)."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted((p for p in root.glob("*.py") if p.is_file()), key=lambda p: p.name)


@dataclass(frozen=True)
class Corpus:
    train: np.ndarray
    """uint8: the training files' bytes, concatenated in name order."""
    val: np.ndarray
    """uint8: the validation files' bytes, concatenated in name order."""
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]


@lru_cache(maxsize=4)
def load_corpus(root: str | None = None) -> Corpus:
    """Read and split the corpus once per process (about 4.7 MB on Python 3.11)."""
    files = stdlib_files(root)
    if not files:
        raise FileNotFoundError(f"no .py files under {root or sysconfig.get_paths()['stdlib']}")
    sides: dict[bool, list[Path]] = {True: [], False: []}
    for path in files:
        sides[is_validation_file(path.name)].append(path)

    def stream(paths: list[Path]) -> np.ndarray:
        return np.frombuffer(b"".join(p.read_bytes() for p in paths), dtype=np.uint8)

    return Corpus(train=stream(sides[False]), val=stream(sides[True]),
                  train_files=tuple(p.name for p in sides[False]), val_files=tuple(p.name for p in sides[True]))


class TrainWindows(Dataset):
    """`count` windows of `context + 1` bytes, spread evenly over the whole training stream.

    Window i starts at `i * stride + phase`; `set_epoch` moves the phase so each epoch reads
    different bytes of the same spread (a capped epoch still covers every file). The item
    depends only on (index, epoch), so replaying the shuffle after a resume gives the same
    batches. Returns (inputs, targets), both int64 [context].
    """

    def __init__(self, stream: np.ndarray, context: int, count: int):
        self.stream = torch.from_numpy(stream.copy())  # uint8; widened per window
        self.context, self.count = context, count
        self.stride = (len(stream) - (context + 1)) // count
        if self.stride < 1:
            raise ValueError(f"{count} windows of {context + 1} bytes do not fit in {len(stream)} bytes")
        self.phase = 0

    def set_epoch(self, epoch: int) -> None:
        # Step the phase by one context per epoch, wrapping inside the stride so the last
        # window still ends inside the stream.
        self.phase = ((epoch - 1) * self.context) % self.stride

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.stride + self.phase
        window = self.stream[start : start + self.context + 1].long()
        return window[:-1], window[1:]


class ValWindows(Dataset):
    """`count` fixed, non-overlapping windows spread over the validation stream."""

    def __init__(self, stream: np.ndarray, context: int, count: int):
        self.stream = torch.from_numpy(stream.copy())  # uint8; widened per window
        self.context, self.count = context, count
        self.stride = (len(stream) - (context + 1)) // max(count - 1, 1)
        if self.stride < context + 1:
            raise ValueError(f"{count} non-overlapping windows of {context + 1} bytes do not fit in "
                             f"{len(stream)} validation bytes; lower val_windows or context")

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.stride
        window = self.stream[start : start + self.context + 1].long()
        return window[:-1], window[1:]

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (previous byte, target byte) the model is scored on, as two flat arrays."""
        windows = np.stack([self.stream[i * self.stride : i * self.stride + self.context + 1].numpy()
                            for i in range(self.count)])
        return windows[:, :-1].ravel(), windows[:, 1:].ravel()


def bigram_cross_entropy(train: np.ndarray, prev: np.ndarray, target: np.ndarray, k: float) -> float:
    """Mean -ln P(target | prev) in nats, P estimated from `train`'s byte pairs with add-k.

    P(b | a) = (count(a, b) + k) / (count(a) + 256 k), count(a) = pairs starting with a.
    """
    train = train.astype(np.int64)
    counts = np.bincount(train[:-1] * 256 + train[1:], minlength=256 * 256).reshape(256, 256).astype(np.float64)
    log_p = np.log(counts + k) - np.log(counts.sum(axis=1, keepdims=True) + 256 * k)
    return float(-log_p[prev.astype(np.int64), target.astype(np.int64)].mean())


def bigram_baseline(train: np.ndarray, val: ValWindows) -> dict[str, float]:
    """The best add-k bigram (k from BIGRAM_KS) on exactly the validation targets the model sees.

    k is chosen on those targets, so the bar is the strictest an add-k bigram can set here.
    """
    prev, target = val.pairs()
    losses = {k: bigram_cross_entropy(train, prev, target, k) for k in BIGRAM_KS}
    best = min(losses, key=losses.get)
    return {"nats_per_byte": losses[best], "bits_per_byte": losses[best] / math.log(2), "k": best,
            "add_one_nats_per_byte": losses[1.0]}
