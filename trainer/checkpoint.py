"""Checkpoint files that are whole or absent.

A plain `torch.save` killed mid-write destroys the previous file at that path, so we
write to a temporary file in the same directory, fsync it, rename it over the target
(atomic on POSIX), and fsync the directory so the rename itself survives a crash.
The SHA-256 of what was written is returned so callers can record and verify it:
`torch.load` accepts a flipped byte without complaint.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from trainer.batches import map_tensors

TMP_PREFIX = ".tmp-"


def to_cpu(tree: Any) -> Any:
    """A copy of a nested state with every tensor on the host (call after the XLA sync)."""
    return map_tensors(tree, lambda t: t.detach().cpu())


def save_atomic(state: Any, path: Path) -> str:
    """torch.save `state` to `path` atomically; returns the file's SHA-256 hex digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(state, writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        return writer.hexdigest()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HashingWriter:
    """A write-only file object that hashes what passes through (no second read)."""

    def __init__(self, f: Any):
        self._f = f
        self._digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
