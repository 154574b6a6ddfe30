"""Trusting a checkpoint file: its bytes checked against its index entry before torch sees them.

`torch.load` accepts a flipped byte silently and raises an unhelpful `EOFError` on an
empty file, so every file is checked (size, then SHA-256) first, and each failure is a
`CheckpointError` naming the file.
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import UserError


class CheckpointError(UserError):
    """A checkpoint could not be written or trusted; the message names the file and the fix."""


@dataclass(frozen=True)
class Loaded:
    """A verified checkpoint, on the host."""

    path: Path
    sha256: str
    state: dict
    """The host state (for a sharded checkpoint: everything but the module and optimizer)."""
    sharded_dir: Path | None = None
    """A sharded checkpoint's directory, whose shards are loaded into the live model later."""


def read_verified(path: Path, entry: dict, what: str = "checkpoint") -> bytes:
    """`path`'s bytes, after checking them against `entry` ({"bytes", "sha256"}); else CheckpointError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{what} {path} is listed in the manifest but the file is missing.") from None
    if len(data) != entry["bytes"]:
        size = "empty" if not data else f"{len(data)} bytes"
        raise CheckpointError(
            f"{what} {path} is {size}, but the manifest recorded {entry['bytes']} bytes "
            "(truncated or overwritten after it was committed)."
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"]:
        raise CheckpointError(
            f"{what} {path} failed verification: sha256 mismatch, file {digest} != manifest "
            f"{entry['sha256']} (the file was corrupted after it was written)."
        )
    return data


def load_host_state(data: bytes, path: Path) -> dict:
    import torch

    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure here means "unusable", with its reason
        raise CheckpointError(f"checkpoint {path} matches its hash but torch.load fails: {exc!r}.") from exc
