"""`TokenShards`: sequences of tokens from shards, in one global order, read per host.

    shards = TokenShards("gs://bucket/tokens", seq_len=1024, global_batch_size=256, seed=0)
    Trainer(devices=8).fit(model, shards)          # or the job YAML's `data:` section

A split is a fixed set of documents chosen by a hash of their names (`validation_fraction`
of them validate). With packing, the split's documents (each followed by end-of-text) are
one stream cut into sequences of `seq_len`; without, each sequence is one document's start,
padded, its padding labelled -100. Sequence i of global batch k in an epoch is sequence
perm[k * G + i] of a seeded permutation (`permutation`) that folds the epoch into the seed,
so the order is the same on any number of hosts and a resumed run needs only its step.
Host h of H reads rows [h * G/H, (h + 1) * G/H) of each global batch; the engine splits
them over its devices. The last partial global batch of an epoch is dropped.
"""
from __future__ import annotations

import math
import queue
import threading
import zlib
from typing import Any, Iterator

import numpy as np
import torch

from trainer.data.tokens.permutation import Permutation, epoch_seed
from trainer.data.tokens.shard_reader import ShardReader
from trainer.errors import UserError

SPLITS = ("train", "validation")
IGNORE = -100
READ_AHEAD = 4
"""Global batches read ahead on a background thread, so a step never waits on the bucket."""


def in_validation(name: str, fraction: float) -> bool:
    return zlib.crc32(name.encode()) % 1_000_000 < fraction * 1_000_000


class TokenShards:
    def __init__(self, path: str, seq_len: int, global_batch_size: int, seed: int = 0, packing: bool = True,
                 split: str = "train", validation_fraction: float = 0.01, read_concurrency: int = 16):
        """`read_concurrency`: on gs://, how many of a batch's ranged reads are in flight at once."""
        if split not in SPLITS:
            raise UserError(f"TokenShards(split={split!r}): allowed: 'train' or 'validation'.")
        if seq_len < 1 or global_batch_size < 1:
            raise UserError(f"TokenShards(seq_len={seq_len}, global_batch_size={global_batch_size}): both must be >= 1.")
        self.path, self.seq_len, self.global_batch_size, self.seed = path, seq_len, global_batch_size, seed
        self.packing, self.split = packing, split
        self.reader = ShardReader(path, read_concurrency)
        tokenizer = self.reader.index["tokenizer"]
        self.vocab_size, self.eot_id = int(tokenizer["vocab_size"]), int(tokenizer["eot_id"])
        want = split == "validation"
        # (shard, offset, tokens incl. end-of-text) of each document of the split, in index order
        spans = [(n, offset, tokens + 1) for n, shard in enumerate(self.reader.index["shards"])
                 for name, offset, tokens in shard["documents"] if in_validation(name, validation_fraction) == want]
        self._spans = np.array(spans, dtype=np.int64).reshape(-1, 3)
        self._starts = np.concatenate([[0], np.cumsum(self._spans[:, 2])]) if len(spans) else np.zeros(1, np.int64)
        self.sequences = int(self._starts[-1] // seq_len) if packing else len(spans)
        self.max_token_id = self.vocab_size - 1
        self._rows = range(global_batch_size)  # a single host until bound

    # ---------------------------------------------------------------- the engine's side
    def bind(self, process_index: int, process_count: int, data_parallel_size: int) -> None:
        """This host's share; a UserError when the global batch does not split evenly."""
        step = math.lcm(process_count, data_parallel_size)
        if self.global_batch_size % step:
            lower = max(step, self.global_batch_size // step * step)
            raise UserError(
                f"global_batch_size={self.global_batch_size} cannot be split evenly over {process_count} host(s) and "
                f"{data_parallel_size} data-parallel devices: it must be a multiple of {step}. Fix: use "
                f"global_batch_size={lower} or {lower + step}.")
        if len(self) == 0:
            raise UserError(
                f"the {self.split} split of {self.path} has {self.sequences} sequence(s) of {self.seq_len} tokens, "
                f"fewer than one global batch of {self.global_batch_size}. Fix: a smaller global_batch_size or "
                "seq_len, more data, or (validation) a larger validation_fraction.")
        rows = self.global_batch_size // process_count
        self._rows = range(process_index * rows, (process_index + 1) * rows)

    def __len__(self) -> int:
        """Global batches per epoch (the last partial one is dropped)."""
        return self.sequences // self.global_batch_size

    def check_model(self, vocab_size: int, max_positions: int | None = None) -> None:
        """A UserError when the model cannot take these tokens (embedding too small, context too short)."""
        if self.vocab_size > vocab_size:
            raise UserError(f"the shards at {self.path} use a vocabulary of {self.vocab_size} tokens but the model's "
                            f"embedding has {vocab_size} rows. Fix: build the model with vocab_size >= "
                            f"{self.vocab_size}, or tokenize with the model's tokenizer.")
        if max_positions is not None and self.seq_len > max_positions:
            raise UserError(f"seq_len={self.seq_len} is longer than the model's {max_positions} positions. Fix: "
                            f"seq_len <= {max_positions}.")

    def epoch(self, epoch: int, start: int = 0) -> Iterator[dict]:
        """This host's rows of global batches start .. len-1 of `epoch`, read ahead in the background."""
        ahead: queue.Queue = queue.Queue(maxsize=READ_AHEAD)
        stop = threading.Event()
        permutation = Permutation(max(self.sequences, 1), epoch_seed(self.seed, epoch))

        def produce() -> None:
            try:
                for k in range(start, len(self)):
                    if stop.is_set():
                        return
                    ahead.put(self.batch(permutation, k))
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
                ahead.put(exc)
            ahead.put(None)

        thread = threading.Thread(target=produce, name="token-read-ahead", daemon=True)
        thread.start()
        try:
            while (item := ahead.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # unblock a producer waiting on a full queue
                try:
                    ahead.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.01)

    def batch(self, permutation: Permutation, k: int) -> dict:
        """This host's rows of global batch `k` under `permutation`."""
        index = permutation[np.arange(k * self.global_batch_size + self._rows.start,
                                      k * self.global_batch_size + self._rows.stop)]
        rows = [self._pieces(int(i)) for i in index]
        tokens = iter(self.reader.read_many([piece for row in rows for piece in row]))
        ids = np.stack([self._row([next(tokens) for _ in row]) for row in rows])
        labels = ids.copy()
        if not self.packing:
            labels[ids < 0] = IGNORE
            ids[ids < 0] = self.eot_id
        return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels)}

    def _sequence(self, i: int) -> np.ndarray:
        """Sequence `i` of the split (padding as -1 without packing, turned into labels -100)."""
        return self._row(self.reader.read_many(self._pieces(i)))

    def _row(self, pieces: list[np.ndarray]) -> np.ndarray:
        out = np.full(self.seq_len, -1, dtype=np.int64)
        got = np.concatenate(pieces)
        out[:len(got)] = got
        return out

    def _pieces(self, i: int) -> list[tuple[int, int, int]]:
        """Sequence `i` of the split as (shard, start, count) ranges: one document's start without
        packing (cut at seq_len), else seq_len tokens of the packed stream, across documents."""
        if not self.packing:
            shard, offset, length = (int(v) for v in self._spans[i])
            return [(shard, offset, min(length, self.seq_len))]
        begin, end = i * self.seq_len, (i + 1) * self.seq_len
        pieces, j = [], int(np.searchsorted(self._starts, begin, side="right")) - 1
        while begin < end:
            shard, offset, length = (int(v) for v in self._spans[j])
            within = begin - int(self._starts[j])
            take = min(length - within, end - begin)
            pieces.append((shard, offset + within, take))
            begin += take
            j += 1
        return pieces
