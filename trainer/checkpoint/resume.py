"""Which checkpoint a resumed run starts from, and where it then writes.

`trainer.resume` is "auto" (the newest checkpoint of the run directory that verifies,
each one skipped reported by name) or a path (that checkpoint, verified against the
index beside it). A fresh run resolves to None.
"""
from __future__ import annotations

import logging
from pathlib import Path

from trainer.checkpoint.index import CHECKPOINT_DIR
from trainer.checkpoint.store import CheckpointStore
from trainer.checkpoint.verify import CheckpointError, Loaded
from trainer.errors import UserError

log = logging.getLogger(__name__)


def find_resume(resume: str, run_dir: Path | None) -> Loaded | None:
    """The verified checkpoint `trainer.resume` asks for, or None to start fresh.

    "auto": the newest checkpoint of run_dir that verifies; each one skipped is reported
    (a warning naming the file and why). None when the run has no committed checkpoint.
    A path: that file, verified against the manifest beside it; any problem refuses.
    """
    if not resume:
        return None
    if resume == "auto":
        store = CheckpointStore(Path(run_dir) / CHECKPOINT_DIR)
        if not store.directory.is_dir():
            log.info("--resume auto: %s has no checkpoints yet; starting fresh", run_dir)
            return None
        loaded, problems = store.newest_valid()
        for problem in problems:
            log.warning("%s", problem)
        if loaded is None:
            if store.entries():
                raise CheckpointError(
                    f"--resume auto: none of the {len(store.entries())} checkpoints in {store.directory} "
                    "verifies:\n  " + "\n  ".join(problems) + "\nFix: resume from a copy you trust with "
                    "--resume PATH, or start a new run in another --run-dir."
                )
            log.info("--resume auto: no committed checkpoint in %s; starting fresh", store.directory)
            return None
        if problems:
            log.warning("resuming from the newest checkpoint that verifies: %s", loaded.path)
        return loaded
    path = Path(resume)
    if not path.exists():
        raise UserError(f"--resume {resume!r}: no such checkpoint. Fix: pass a file (or, for a sharded model, a "
                        "directory) under RUN_DIR/checkpoints/, or --resume auto.")
    return CheckpointStore(path.parent).load(path)


def run_dir_for(resume: str, configured: str) -> Path | None:
    """Where a resumed run writes: --run-dir if given, else the run the checkpoint came from."""
    if configured:
        return Path(configured)
    path = Path(resume)
    if resume and resume != "auto" and path.parent.name == CHECKPOINT_DIR:
        return path.parent.parent
    return None
