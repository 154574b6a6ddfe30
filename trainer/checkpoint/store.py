"""Which checkpoint files count, and whether a file is still what was written.

A checkpoint counts only once its entry is committed to the index (`trainer.checkpoint.index`),
and the index is only ever replaced atomically. So a crash at any moment leaves either the
old set or the new set: a file without an entry (killed between rename and commit) is
reported and ignored, and `keep_last` drops old entries only after the new one is committed.
On load every file is checked against its entry (`trainer.checkpoint.verify`).
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.checkpoint.index import INDEX, LEGACY_INDEX, document, entries_of, index_path, new_entry
from trainer.checkpoint.io import clean_temporaries, save_atomic
from trainer.checkpoint.sharded import verify_checkpoint_dir, write_checkpoint_dir
from trainer.checkpoint.verify import CheckpointError, Loaded, load_host_state, read_verified
from trainer.outputs.atomic_files import TMP_PREFIX, fsync_dir, write_json_atomic

log = logging.getLogger(__name__)

FINAL = "final.ckpt"
FINAL_SHARDED = "final.dcp"
CHECKPOINT_SUFFIXES = (".ckpt", ".dcp")  # a file; a directory of shards (trainer.checkpoint.sharded)


class CheckpointStore:
    """The checkpoints of one run directory: commit, prune, verify, find the newest valid."""

    def __init__(self, directory: Path, keep_last: int = 0):
        self.directory = directory
        self.keep_last = keep_last

    @property
    def manifest_path(self) -> Path:
        """The index this store reads (an older run's `manifest.json` until the first commit here)."""
        return index_path(self.directory)

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
        return self._save(name, meta, lambda path: write_checkpoint_dir(module, optimizer, host_state, path))

    def _save(self, name: str, meta: dict, write: Any) -> dict:
        path = self.directory / name
        try:
            self._retire(name)
            written = write(path)  # whole or absent: a temporary, renamed into place
            entry = new_entry(name, written, meta)
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
        write_json_atomic(document(entries), self.directory / INDEX)
        (self.directory / LEGACY_INDEX).unlink(missing_ok=True)  # an older run's index, now carried over

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
        path = self.manifest_path
        if not path.exists():
            return []
        try:
            return entries_of(path.read_text())
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"the checkpoint manifest {path} is unreadable ({exc}). It is only "
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
        return Loaded(path=path, sha256=entry["sha256"], state=verify_checkpoint_dir(path, entry), sharded_dir=path)
    return Loaded(path=path, sha256=entry["sha256"], state=load_host_state(read_verified(path, entry), path))
