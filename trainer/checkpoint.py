"""Checkpoint files that are whole or absent.

A plain `torch.save` killed mid-write destroys the previous file at that path, so we
write to a temporary file in the same directory, fsync it, rename it over the target
(atomic on POSIX), and fsync the directory so the rename itself survives a crash.
The SHA-256 of what was written is returned so callers can record and verify it:
`torch.load` accepts a flipped byte without complaint. Which files count as checkpoints
(the manifest, verification, keep_last) is `trainer.checkpoint_manifest`'s business.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from trainer.batches import map_tensors

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
FILE_MODE = 0o644  # mkstemp creates 0600; checkpoints are shared like every other output


def to_cpu(tree: Any) -> Any:
    """A copy of a nested state with every tensor on the host (call after the XLA sync)."""
    return map_tensors(tree, lambda t: t.detach().cpu())


def save_atomic(state: Any, path: Path) -> str:
    """torch.save `state` to `path` atomically; returns the file's SHA-256 hex digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    tmp = Path(tmp_name)
    writer = None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(state, writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        return writer.hexdigest()
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if writer is not None and writer.error is not None and exc is not writer.error:
            # torch.save's zip writer turns a failed write (ENOSPC) into a RuntimeError
            # ("unexpected pos ..."); the OSError is the real cause, so raise that.
            raise writer.error from exc
        raise


def write_json_atomic(data: Any, path: Path) -> None:
    """Write JSON whole or not at all (temp file, fsync, rename, fsync of the directory)."""
    fd, tmp_name = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def clean_temporaries(directory: Path) -> list[Path]:
    """Delete what a killed writer left behind (our temp prefix only); returns what went.

    Safe only at start-up, when no writer of this run is alive.
    """
    removed = []
    if directory.is_dir():
        for leftover in sorted(directory.glob(TMP_PREFIX + "*")):
            leftover.unlink(missing_ok=True)
            removed.append(leftover)
    if removed:
        log.info("removed %d unfinished checkpoint temporaries in %s: %s", len(removed), directory,
                 ", ".join(p.name for p in removed))
    return removed


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
