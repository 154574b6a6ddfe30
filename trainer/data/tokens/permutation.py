"""One seeded pseudo-random order of N items, computed per index: nothing of size N is built.

A Feistel network is a bijection on [0, 2^(2h)) for any round function; cycle-walking
(apply it again while the result is >= N) restricts it to a bijection on [0, N). So the
global order of every sequence of every epoch is a pure function of (seed, epoch, index),
the same on every host and after any resume, as Levanter does for its data.
"""
from __future__ import annotations

import numpy as np

ROUNDS = 4
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a good 64-bit hash, vectorised."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Permutation:
    """A bijection of [0, n) chosen by `seed`; `perm[i]` for any integer array of indices."""

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise ValueError(f"a permutation needs at least one item, got n={n}")
        self.n = n
        half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
        self.half_bits = np.uint64(half)
        self.half_mask = np.uint64((1 << half) - 1)
        with np.errstate(over="ignore"):
            base = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
            self.keys = [_mix(np.array([base + np.uint64(r + 1)], dtype=np.uint64))[0] for r in range(ROUNDS)]

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half_bits, x & self.half_mask
        for key in self.keys:
            with np.errstate(over="ignore"):
                left, right = right, left ^ (_mix(right ^ key) & self.half_mask)
        return (left << self.half_bits) | right

    def __getitem__(self, index) -> np.ndarray:
        x = np.asarray(index, dtype=np.uint64)
        if np.any(x >= np.uint64(self.n)):
            raise IndexError(f"index out of [0, {self.n})")
        out = self._feistel(x)
        todo = out >= np.uint64(self.n)
        while np.any(todo):  # cycle-walking: at most a few rounds, the domain is < 4n
            out[todo] = self._feistel(out[todo])
            todo = out >= np.uint64(self.n)
        return out.astype(np.int64)


def epoch_seed(seed: int, epoch: int) -> int:
    """Each epoch re-permutes: the epoch is folded into the seed."""
    return int(_mix(np.array([(seed * 1_000_003 + epoch) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0])
