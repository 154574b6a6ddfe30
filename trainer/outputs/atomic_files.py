"""Files that are whole or absent: the one way the engine replaces a file it owns.

A plain write killed half-way leaves a truncated file, and a plain `torch.save` killed
mid-write destroys the previous file at that path. So every write goes to a temporary
file in the same directory, is fsynced, renamed over the target (atomic on POSIX), and
the directory is fsynced so the rename itself survives a crash. Imports no torch.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

TMP_PREFIX = ".tmp-"
FILE_MODE = 0o644  # mkstemp creates 0600; run outputs are shared like any other file


@contextlib.contextmanager
def atomic_writer(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield a file whose contents replace `path` only if the block completes."""
    fd, tmp_name = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(text: str, path: Path) -> None:
    with atomic_writer(path) as f:
        f.write(text)


def write_bytes_atomic(data: bytes, path: Path) -> None:
    with atomic_writer(path, "wb") as f:
        f.write(data)


def write_json_atomic(data: Any, path: Path) -> None:
    write_text_atomic(json.dumps(data, indent=2) + "\n", path)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
