"""Which checkpoint files count, and whether a file is still what was written.

    RUN_DIR/checkpoints/manifest.json   {"format": 1, "checkpoints": [entry, ... oldest first]}
    entry: file, sha256, bytes, global_step, epoch, position, reason, saved_at

A checkpoint counts only once its entry is committed to the manifest, and the manifest
is only ever replaced atomically. So a crash at any moment leaves either the old set or
the new set: a file without an entry (killed between rename and commit) is reported and
ignored, and `keep_last` drops old entries only after the new one is committed.

On load every file is checked against its entry (size, then SHA-256) before
`torch.load` sees it: torch.load accepts a flipped byte silently, and raises an
unhelpful `EOFError` on an empty file.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.outputs.atomic_files import TMP_PREFIX, fsync_dir, write_json_atomic
from trainer.checkpoint.io import clean_temporaries, save_atomic
from trainer.errors import UserError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = 1
FINAL = "final.ckpt"
FINAL_SHARDED = "final.dcp"
CHECKPOINT_SUFFIXES = (".ckpt", ".dcp")  # a file; a directory of shards (trainer.checkpoint.sharded)


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


class CheckpointStore:
    """The checkpoints of one run directory: commit, prune, verify, find the newest valid."""

    def __init__(self, directory: Path, keep_last: int = 0):
        self.directory = directory
        self.keep_last = keep_last
        self.manifest_path = directory / MANIFEST

    # ---------------------------------------------------------------- writing
    def start(self) -> None:
        """Create the directory and remove a killed writer's temporaries (start-up only)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        clean_temporaries(self.directory)

    def save(self, state: dict, name: str, meta: dict) -> dict:
        """Write `state` as the file `name`, commit its manifest entry, then prune; returns the entry.

        Raises CheckpointError (naming the file and keeping the previous checkpoints) if the
        disk is full or the write fails otherwise.
        """
        return self._save(name, meta, lambda path: {"sha256": save_atomic(state, path), "bytes": path.stat().st_size})

    def save_sharded(self, module: Any, optimizer: Any, host_state: dict, name: str, meta: dict) -> dict:
        """As `save`, for a sharded model: the directory `name` of shards plus `host_state`."""
        from trainer.checkpoint.sharded import write_checkpoint_dir

        return self._save(name, meta, lambda path: write_checkpoint_dir(module, optimizer, host_state, path))

    def _save(self, name: str, meta: dict, write: Any) -> dict:
        path = self.directory / name
        try:
            self._retire(name)
            written = write(path)  # whole or absent: a temporary, renamed into place
            entry = {"file": name, **written, **meta, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            entries = [e for e in self.entries() if e["file"] != name] + [entry]
            self._commit(entries)  # only now does the checkpoint count
        except OSError as exc:
            previous = self.entries()
            kept = f"the previous checkpoint {previous[-1]['file']} is intact" if previous else "no earlier checkpoint exists"
            raise CheckpointError(
                f"cannot write the checkpoint {path}: {exc.strerror or exc} (errno {exc.errno}); "
                f"{kept}. Fix: free space on that disk or point --run-dir at a larger one, then "
                "rerun with --resume auto."
            ) from exc
        self._prune()
        return entry

    def _retire(self, name: str) -> None:
        """Keep a committed file under a new name before `name` is reused (final.ckpt of an
        extended run, a step redone after a resume): a committed file is never overwritten."""
        entries = self.entries()
        old = next((e for e in entries if e["file"] == name), None)
        if old is None:
            return
        retired = f"{Path(name).stem}-at-step-{old['global_step']:08d}{Path(name).suffix}"
        target = self.directory / retired
        _remove(target)
        try:
            _link(self.directory / name, target)  # a second name for the same bytes: no copy
        except FileNotFoundError:  # nothing left to keep: just forget the entry
            self._commit([e for e in entries if e is not old])
            return
        self._commit([{**e, "file": retired} if e is old else e for e in entries])

    def _commit(self, entries: list[dict]) -> None:
        write_json_atomic(manifest_document(entries), self.manifest_path)

    def _prune(self) -> None:
        """Keep the newest `keep_last` periodic checkpoints (and final.ckpt, always)."""
        if self.keep_last <= 0:
            return
        entries = self.entries()
        periodic = [e for e in entries if e["file"] not in (FINAL, FINAL_SHARDED)]
        doomed = periodic[: max(0, len(periodic) - self.keep_last)]
        if not doomed:
            return
        self._commit([e for e in entries if e not in doomed])  # forget first, delete after
        for entry in doomed:
            _remove(self.directory / entry["file"])
            log.info("keep_last=%d: removed %s", self.keep_last, entry["file"])

    # ---------------------------------------------------------------- reading
    def entries(self) -> list[dict]:
        """The committed entries, oldest first ([] when there is no manifest yet)."""
        if not self.manifest_path.exists():
            return []
        try:
            data = json.loads(self.manifest_path.read_text())
            return list(data["checkpoints"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"the checkpoint manifest {self.manifest_path} is unreadable ({exc}). It is only "
                "ever replaced atomically, so it was edited or damaged by hand. Fix: restore it, or "
                "resume from one file with --resume PATH after re-creating its entry."
            ) from exc

    def unlisted_files(self) -> list[Path]:
        """Checkpoint files with no manifest entry: a save that never committed (or a lost entry)."""
        listed = {e["file"] for e in self.entries()}
        return sorted(p for p in self.directory.iterdir() if p.suffix in CHECKPOINT_SUFFIXES
                      and p.name not in listed and not p.name.startswith(TMP_PREFIX))

    def load(self, path: Path) -> Loaded:
        """Verify `path` against its entry in this manifest, then torch.load it on the host."""
        entry = next((e for e in self.entries() if e["file"] == path.name), None)
        if entry is None:
            raise CheckpointError(
                f"checkpoint {path} has no entry in {self.manifest_path}, so its save never "
                "committed (the process died between writing and committing) or the entry was "
                "removed; it cannot be verified and is not used."
            )
        return _verified_load(path, entry)

    def newest_valid(self) -> tuple[Loaded | None, list[str]]:
        """The newest checkpoint that verifies, and one message per file skipped on the way."""
        problems = [
            f"checkpoint {p} has no entry in {self.manifest_path} (a save that never committed, "
            "or a removed entry); ignored." for p in self.unlisted_files()
        ]
        for entry in reversed(self.entries()):
            try:
                return _verified_load(self.directory / entry["file"], entry), problems
            except CheckpointError as exc:
                problems.append(str(exc))
        return None, problems


def manifest_document(entries: list[dict]) -> dict:
    return {"format": FORMAT, "checkpoints": entries}


def entry_files(entry: dict) -> dict[str, str]:
    """Every file a committed entry stands for, relative to the checkpoint directory -> SHA-256."""
    if "files" in entry:  # a directory of shards
        return {f"{entry['file']}/{name}": recorded["sha256"] for name, recorded in entry["files"].items()}
    return {entry["file"]: entry["sha256"]}


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _link(source: Path, target: Path) -> None:
    """Hard-link a file, or every file of a directory, under a second name (fsynced)."""
    if not source.is_dir():
        os.link(source, target)
        return
    target.mkdir()
    for item in sorted(source.iterdir()):
        os.link(item, target / item.name)
    fsync_dir(target)
    fsync_dir(target.parent)


def _verified_load(path: Path, entry: dict) -> Loaded:
    if "files" in entry:  # a directory of shards: each file checked now, the shards loaded later
        from trainer.checkpoint.sharded import verify_checkpoint_dir

        return Loaded(path=path, sha256=entry["sha256"], state=verify_checkpoint_dir(path, entry), sharded_dir=path)
    return Loaded(path=path, sha256=entry["sha256"], state=load_host_state(read_verified(path, entry), path))


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
