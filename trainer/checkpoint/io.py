"""Checkpoint files that are whole or absent (written through `trainer.outputs.atomic_files`).

The SHA-256 of what was written is returned so callers can record and verify it:
`torch.load` accepts a flipped byte without complaint. Which files count as checkpoints
(the manifest, verification, keep_last) is `trainer.checkpoint.store`'s business.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from trainer.outputs.atomic_files import TMP_PREFIX, atomic_writer
from trainer.data.batches import map_tensors

log = logging.getLogger(__name__)


def to_cpu(tree: Any) -> Any:
    """A copy of a nested state with every tensor on the host (call after the XLA sync)."""
    return map_tensors(tree, lambda t: t.detach().cpu())


def save_atomic(state: Any, path: Path) -> str:
    """torch.save `state` to `path` atomically; returns the file's SHA-256 hex digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    try:
        with atomic_writer(path, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(state, writer)
    except BaseException as exc:
        if writer is not None and writer.error is not None and exc is not writer.error:
            # torch.save's zip writer turns a failed write (ENOSPC) into a RuntimeError
            # ("unexpected pos ..."); the OSError is the real cause, so raise that.
            raise writer.error from exc
        raise
    return writer.hexdigest()


def clean_temporaries(directory: Path) -> list[Path]:
    """Delete what a killed writer left behind (our temp prefix only); returns what went.

    Safe only at start-up, when no writer of this run is alive.
    """
    removed = []
    if directory.is_dir():
        for leftover in sorted(directory.glob(TMP_PREFIX + "*")):
            if leftover.is_dir():  # a sharded checkpoint's directory, killed before its rename
                shutil.rmtree(leftover)
            else:
                leftover.unlink(missing_ok=True)
            removed.append(leftover)
    if removed:
        log.info("removed %d unfinished checkpoint temporaries in %s: %s", len(removed), directory,
                 ", ".join(p.name for p in removed))
    return removed


def sha256_of(path: Path) -> str:
    return file_digest(path, hashlib.sha256()).hexdigest()


def file_digest(path: Path, digest: Any) -> Any:
    """Feed `path`'s bytes to a hashlib object in 1 MiB chunks; returns it."""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest


class _HashingWriter:
    """A write-only file object that hashes what passes through (no second read)."""

    def __init__(self, f: Any):
        self._f = f
        self._digest = hashlib.sha256()
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        try:
            return self._f.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self._f.flush()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
