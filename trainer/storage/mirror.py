"""A gs:// run directory, published from its local staging copy.

    connect    before any XLA work: parse the URL, write a probe object (a missing bucket
               or permission is one paragraph now, not after the first epoch)
    prepare    refuse a bucket path that already holds a run (unless resuming); refill the
               staging copy: every output file, and the newest checkpoint whose files
               hash-verify, falling back to older ones
    publish    after each local checkpoint commit: upload the files no committed remote
               entry has yet, check each object's MD5 against the local file, then commit
               the manifest object last, with a generation precondition
    push       at epoch end and at exit: upload output files that changed (process 0), and
               each process's own log, RUN_DIR/workers/<index>/train.log

The commit rule on an object store, which has no atomic rename: an entry counts once the
manifest object lists it, and that object is replaced only after every file it names is
uploaded and verified. An object the committed manifest still names is never overwritten
(a reused name such as final.ckpt is first dropped from the committed manifest). So a
crash, a dropped connection or a 5xx at any moment leaves the previous checkpoint valid in
the bucket. The precondition (the generation this process last committed) makes a second
writer of the same run fail with HTTP 412 instead of silently replacing the manifest.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from trainer.outputs.atomic_files import TMP_PREFIX
from trainer.checkpoint.index import CHECKPOINT_DIR, INDEX, LEGACY_INDEX, document, entry_files
from trainer.checkpoint.store import CheckpointStore
from trainer.checkpoint.verify import CheckpointError
from trainer.errors import UserError
from trainer.storage.bucket import (
    PROBE_PREFIX, check_writable, filesystem, md5_base64, storage_error, upload_if_generation,
)
from trainer.storage.location import RemoteRunDir, parse_remote

log = logging.getLogger(__name__)

class RunMirror:
    """One run directory in a bucket and the local directory the engine writes it through."""

    def __init__(self, remote: RemoteRunDir, fs: Any):
        self.remote, self.fs = remote, fs
        self.staging = remote.staging
        self._pushed: dict[str, tuple[int, int]] = {}  # output file -> (size, mtime_ns) last uploaded
        self._published: set[tuple[str, str]] = set()  # (checkpoint file, sha256) verified in the bucket
        self._committed: list[dict] = []  # the entries the manifest object lists
        self._generation = 0  # of the manifest object, as this process last saw or wrote it
        self._worker_log: logging.Handler | None = None
        self._worker_dir = ""

    @classmethod
    def connect(cls, run_dir: str, said: str) -> "RunMirror":
        """Parse `run_dir` and prove the bucket takes writes; a UserError quotes `said` (the
        setting as the user wrote it: run_dir='gs://...', --run-dir gs://..., RUN_DIR=...)."""
        remote = parse_remote(run_dir, said)
        fs = filesystem()
        started = time.perf_counter()
        check_writable(fs, remote, said)
        log.info("run directory %s (staged in %s); bucket writable, checked in %.2f s", remote.url,
                 remote.staging, time.perf_counter() - started)
        return cls(remote, fs)

    # ---------------------------------------------------------------- start-up
    def prepare(self, resuming: bool, owner: bool) -> Path:
        """Refill the staging directory from the bucket; returns it (the engine's run directory).

        `owner`: this process writes the run (process 0); only it removes a killed upload's
        leftovers. Refuses a bucket path that already holds a run unless `resuming`.
        """
        found = self._list("")
        if found and not resuming:
            raise UserError(
                f"the run directory {self.remote.url} already holds {len(found)} objects, and tpu-trainer never "
                "overwrites a run. Fix: pass a new --run-dir (or RUN_DIR=...), or continue that run with "
                "--resume auto (RESUME=auto)."
            )
        if self.staging.exists():  # a cache of the bucket: the bucket is the truth
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True)
        if found:
            self._pull(found, owner)
        return self.staging

    def _pull(self, found: dict[str, dict], owner: bool) -> None:
        started, pulled = time.perf_counter(), 0
        index, legacy = f"{CHECKPOINT_DIR}/{INDEX}", f"{CHECKPOINT_DIR}/{LEGACY_INDEX}"
        for rel, info in found.items():
            if not rel.startswith(CHECKPOINT_DIR + "/"):
                pulled += self._download(rel, info)
        if index in found:
            self._generation = int(found[index]["generation"])
        if index in found or legacy in found:  # an older run's index is read; the next commit writes index.json
            self._download(index if index in found else legacy, found.get(index) or found[legacy])
            self._committed = CheckpointStore(self.staging / CHECKPOINT_DIR).entries()
        for entry in self._committed:  # in the bucket and committed: never uploaded again, even if not pulled
            self._published |= {(rel, sha) for rel, sha in entry_files(entry).items()
                                if f"{CHECKPOINT_DIR}/{rel}" in found}
        listed = _object_names(self._committed)
        leftovers = sorted(rel for rel in found if rel.startswith(CHECKPOINT_DIR + "/") and rel not in listed)
        if leftovers and owner:  # a save killed before its commit; no writer of this run is alive now
            self.fs.rm([self.remote.object_path(rel) for rel in leftovers])
            log.info("removed %d uncommitted checkpoint objects from %s: %s", len(leftovers), self.remote.url,
                     ", ".join(leftovers[:5]) + (" ..." if len(leftovers) > 5 else ""))
        for entry in reversed(self._committed):  # newest first, until one hash-verifies
            files = entry_files(entry)
            if not all(f"{CHECKPOINT_DIR}/{rel}" in found for rel in files):
                log.warning("checkpoint %s/%s/%s is listed in the manifest but objects are missing; trying an "
                            "older one", self.remote.url, CHECKPOINT_DIR, entry["file"])
                continue
            for rel in files:
                pulled += self._download(f"{CHECKPOINT_DIR}/{rel}", found[f"{CHECKPOINT_DIR}/{rel}"])
            if all(_sha256(self.staging / CHECKPOINT_DIR / rel) == sha for rel, sha in files.items()):
                break
            # the resume (trainer.checkpoint.policy) reports the mismatch, naming the file, and goes on
        seconds = time.perf_counter() - started
        log.info("pulled %s from %s in %.2f s (%.0f MB/s)", _size(pulled), self.remote.url, seconds,
                 pulled / 1e6 / max(seconds, 1e-9))

    # ---------------------------------------------------------------- outputs
    def capture_worker_log(self, process_index: int) -> None:
        """Copy this process's log records into RUN_DIR/workers/<index>/train.log: on a pod,
        the only way to read a worker's log after its VM is gone."""
        self._worker_dir = f"workers/{process_index}"
        path = self.staging / self._worker_dir / "train.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._worker_log = logging.FileHandler(path)
        self._worker_log.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s: %(message)s"))
        logging.getLogger().addHandler(self._worker_log)

    def release_worker_log(self) -> None:
        if self._worker_log is not None:
            logging.getLogger().removeHandler(self._worker_log)
            self._worker_log.close()
            self._worker_log = None

    def push_outputs(self, everything: bool = True) -> None:
        """Upload the output files (not checkpoints) that changed since the last push; with
        `everything` False (processes other than 0) only this process's workers/<index>/."""
        for path in sorted(p for p in self.staging.rglob("*") if p.is_file()):
            rel = path.relative_to(self.staging).as_posix()
            if rel.startswith(CHECKPOINT_DIR + "/") or path.name.startswith(TMP_PREFIX):
                continue
            if not everything and not rel.startswith(self._worker_dir + "/"):
                continue
            stat = path.stat()
            if self._pushed.get(rel) != (stat.st_size, stat.st_mtime_ns):
                self.fs.put_file(str(path), self.remote.object_path(rel))
                self._pushed[rel] = (stat.st_size, stat.st_mtime_ns)

    # ---------------------------------------------------------------- checkpoints
    def publish_checkpoints(self) -> None:
        """Make the bucket's checkpoints what the staging manifest says, keeping the commit rule."""
        started = time.perf_counter()
        try:
            uploaded = self._publish()
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - gcsfs raises many types; non-storage ones re-raise
            if not storage_error(exc):
                raise
            newest = self._committed[-1]["file"] if self._committed else None
            kept = f"its newest committed checkpoint, {newest}, is intact" if newest else "it has no checkpoint yet"
            raise CheckpointError(
                f"cannot upload the checkpoint to {self.remote.url}/{CHECKPOINT_DIR} ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())}), even after retrying with backoff. The bucket was not changed "
                f"in a way that counts: {kept}; the new checkpoint is committed locally in "
                f"{self.staging / CHECKPOINT_DIR}. Fix: restore access to the bucket, then rerun with --resume auto."
            ) from exc
        if uploaded:
            seconds = time.perf_counter() - started
            log.info("published %s of checkpoints to %s in %.2f s (%.0f MB/s)", _size(uploaded), self.remote.url,
                     seconds, uploaded / 1e6 / max(seconds, 1e-9))

    def _publish(self) -> int:
        entries = CheckpointStore(self.staging / CHECKPOINT_DIR).entries()
        named = {rel for e in self._committed for rel in entry_files(e)}
        ready, later, uploaded = [], [], 0
        for entry in entries:
            todo = {rel: sha for rel, sha in entry_files(entry).items() if (rel, sha) not in self._published}
            if any(rel in named for rel in todo):  # a reused name (final.ckpt of an extended run) with new bytes
                later.append((entry, todo))  # would replace an object the committed manifest names
                continue
            uploaded += self._upload(todo)
            ready.append(entry)
        if later:  # first commit a manifest that no longer names them, then replace them
            self._commit([e for e in entries if e in ready])
            for _, todo in later:
                uploaded += self._upload(todo)
        if entries != self._committed:
            self._commit(entries)
        listed = _object_names(entries)
        unlisted = [rel for rel in self._list(CHECKPOINT_DIR) if rel not in listed]
        if unlisted:  # pruned (keep_last) or retired entries: forget first (committed above), delete after
            self.fs.rm([self.remote.object_path(rel) for rel in unlisted])
        return uploaded

    def _upload(self, files: dict[str, str]) -> int:
        """Upload checkpoint files and check each object's MD5 against the local file."""
        total = 0
        for rel, sha in sorted(files.items()):
            path, target = self.staging / CHECKPOINT_DIR / rel, self.remote.object_path(f"{CHECKPOINT_DIR}/{rel}")
            self.fs.put_file(str(path), target)
            expected, stored = md5_base64(path), self.fs.info(target).get("md5Hash")
            if stored != expected:
                raise CheckpointError(
                    f"the uploaded object gs://{target} does not match the local file {path} (MD5 {stored} != "
                    f"{expected}): the upload was damaged. The manifest object was not updated, so the bucket's "
                    "previous checkpoint stays the newest valid one. Fix: rerun with --resume auto."
                )
            self._published.add((rel, sha))
            total += path.stat().st_size
        return total

    def _commit(self, entries: list[dict]) -> None:
        data = (json.dumps(document(entries), indent=2) + "\n").encode()
        path = self.remote.object_path(f"{CHECKPOINT_DIR}/{INDEX}")
        try:
            self._generation = upload_if_generation(self.fs, path, data, self._generation)
        except FileExistsError:
            raise CheckpointError(
                f"the checkpoint manifest gs://{path} was changed by another writer since this run last "
                f"committed it (generation {self._generation} expected): two jobs are writing one run "
                "directory. Nothing was overwritten. Fix: give each job its own --run-dir."
            ) from None
        self._committed = list(entries)

    # ---------------------------------------------------------------- helpers
    def _list(self, under: str) -> dict[str, dict]:
        """Objects under the run's prefix (or a folder of it): relative name -> info."""
        base = self.remote.object_path(under).rstrip("/")
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return {}
        prefix = self.remote.object_path("")
        return {path[len(prefix):]: info for path, info in found.items()
                if path.startswith(prefix) and info.get("type") != "directory"
                and not path[len(prefix):].startswith(PROBE_PREFIX)}

    def _download(self, rel: str, info: dict) -> int:
        target = self.staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(self.remote.object_path(rel), str(target))
        stat = target.stat()
        self._pushed[rel] = (stat.st_size, stat.st_mtime_ns)
        return int(info.get("size", stat.st_size))


def _object_names(entries: list[dict]) -> set[str]:
    """Every object (relative to the run) a manifest listing `entries` names, the manifest included."""
    return {f"{CHECKPOINT_DIR}/{rel}" for e in entries for rel in entry_files(e)} | {f"{CHECKPOINT_DIR}/{INDEX}"}


def _sha256(path: Path) -> str:
    from trainer.checkpoint.io import sha256_of

    return sha256_of(path) if path.exists() else ""


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"

