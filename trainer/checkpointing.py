"""When to checkpoint, what goes in, and which checkpoint a resumed run starts from.

A checkpoint file holds (all on the host, loadable with `torch.load(weights_only=True)`):
    module, optimizer, scheduler, accumulators   device state after the last step
    global_step, epoch                           steps done; epochs fully done
    position {"epoch", "batch"}                  the epoch the next step is in, and how
                                                 many of its batches are done
    epoch_start_rng                              host RNG + loader generators at that
                                                 epoch's start (see trainer.training_state)
    xla_rng, config, format

Checkpoints are written at step boundaries only: every `checkpoint.every_n_steps`, after
every `checkpoint.every_n_epochs` epochs (post validation), on SIGTERM/SIGINT, and as
final.ckpt after the last epoch. Only the process that writes shared outputs (process 0)
writes: under SPMD data parallelism every parameter is replicated, so its copy is whole.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trainer.checkpoint_manifest import FINAL, CheckpointError, CheckpointStore, Loaded
from trainer.errors import UserError
from trainer.training_state import STATE_FORMAT, capture_training_state

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"


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
    if not path.is_file():
        raise UserError(f"--resume {resume!r}: no such checkpoint file. Fix: pass a file under RUN_DIR/checkpoints/, or --resume auto.")
    return CheckpointStore(path.parent).load(path)


def run_dir_for(resume: str, configured: str) -> Path | None:
    """Where a resumed run writes: --run-dir if given, else the run the checkpoint came from."""
    if configured:
        return Path(configured)
    path = Path(resume)
    if resume and resume != "auto" and path.parent.name == CHECKPOINT_DIR:
        return path.parent.parent
    return None


class Checkpointer:
    """Saves checkpoints of one fit at the moments the config asks for."""

    def __init__(self, config: Any, store: CheckpointStore | None, job: dict, device: Any, max_epochs: int):
        self.config, self.store, self.job, self.device = config, store, job, device
        self.max_epochs = max_epochs
        self.last_saved: tuple[int, int] | None = None  # (global_step, position epoch)
        self.last_path: Path | None = None

    def due_after_step(self, global_step: int, batches_done: int, epoch_len: int) -> bool:
        n = self.config.every_n_steps
        return bool(n) and global_step % n == 0 and batches_done < epoch_len  # epoch end saves itself

    def due_after_epoch(self, epoch: int) -> bool:
        n = self.config.every_n_epochs
        return epoch == self.max_epochs or (bool(n) and epoch % n == 0)

    def save(self, parts: Any, *, global_step: int, position: tuple[int, int], epoch_start_rng: dict,
             reason: str) -> Path | None:
        """Capture the device state (every process) and write it (the writing process only)."""
        epoch, batch = position
        if self.last_saved == (global_step, epoch):
            return self.last_path  # this exact state is already committed (e.g. SIGTERM right after a save)
        state = capture_training_state(parts.module, parts.optimizer, parts.scheduler, parts.accumulators, self.device)
        state.update(format=STATE_FORMAT, global_step=global_step, epoch=epoch - 1,
                     position={"epoch": epoch, "batch": batch}, epoch_start_rng=epoch_start_rng, config=self.job)
        self.last_saved = (global_step, epoch)
        if self.store is None:
            return None
        final = batch == 0 and epoch == self.max_epochs + 1
        name = FINAL if final else f"step-{global_step:08d}.ckpt"
        entry = self.store.save(state, name, {"global_step": global_step, "epoch": epoch - 1,
                                              "position": {"epoch": epoch, "batch": batch}, "reason": reason})
        self.last_path = self.store.directory / name
        log.info("checkpoint (%s): %s, step %d, sha256 %s", reason, self.last_path, global_step, entry["sha256"][:12])
        return self.last_path
