"""`DataConfig`: pre-tokenized shards to train on (the job's `data:` section).

Imports no torch: validated with the rest of the job config, before XLA starts.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainer.errors import require


@dataclass(frozen=True)
class DataConfig:
    """Pre-tokenized shards to train on (`tpu-trainer tokenize` writes them). An empty path: the
    loaders handed to `fit`, else the module's own train_dataloader()/val_dataloader()."""

    path: str = ""
    """A shard directory, local or gs://BUCKET/PATH (its index.json, shards and tokenizer)."""
    seq_len: int = 0
    """Tokens per sequence; at most the model's positions."""
    global_batch_size: int = 0
    """Sequences per micro-step over all hosts and devices; the hosts times the data-carrying mesh
    axes must divide it."""
    seed: int = 0
    """Seeds the global order of the sequences (re-permuted every epoch with the epoch in the seed)."""
    packing: bool = True
    """Concatenate documents across boundaries; false: every sequence starts at a document start,
    padded with labels -100."""
    validation_fraction: float = 0.01
    """The fraction of documents (chosen by a hash of their name) held out for validation."""

    def __post_init__(self) -> None:
        if not self.path:
            return
        require(self.seq_len >= 1, "data.seq_len", self.seq_len, "an integer >= 1 (tokens per sequence)")
        require(self.global_batch_size >= 1, "data.global_batch_size", self.global_batch_size,
                 "an integer >= 1 (sequences per micro-step over all devices)")
        require(0 <= self.validation_fraction < 1, "data.validation_fraction", self.validation_fraction,
                 "a fraction in [0, 1)")
