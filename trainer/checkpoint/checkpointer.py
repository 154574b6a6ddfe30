"""`Checkpointer`: when a fit saves, and what goes in.

A checkpoint file holds (all on the host, loadable with `torch.load(weights_only=True)`):
    module, optimizer, scheduler, accumulators   device state after the last step
    global_step, epoch                           steps done; epochs fully done
    position {"epoch", "batch"}                  the epoch the next step is in, and how
                                                 many of its batches are done
    epoch_start_rng                              host RNG + loader generators at that
                                                 epoch's start (see trainer.checkpoint.state)
    xla_rng, config, format
    hyper_parameters                             the module's save_hyperparameters(), if any
    (the module's own keys)                      what its on_save_checkpoint(checkpoint) added

A sharded model (strategy fsdp) is checkpointed as a directory instead (`step-N.dcp/`,
`final.dcp/`): its module and optimizer state as shards (`trainer.checkpoint.sharded`),
the rest as the same host dict in `host.pt`. Either format resumes into either strategy.

Checkpoints are written at step boundaries only: every `checkpoint.every_n_steps`, after
every `checkpoint.every_n_epochs` epochs (post validation), on SIGTERM/SIGINT, and as
final.ckpt (final.dcp) after the last epoch. Only the process that writes shared outputs
(process 0) writes: under data parallelism every parameter is replicated, so its copy is
whole; a sharded model's shards all live in this one process (one host).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trainer.checkpoint.state import STATE_FORMAT, TrainState, capture_training_state
from trainer.checkpoint.store import FINAL, FINAL_SHARDED, CheckpointStore
from trainer.errors import UserError

log = logging.getLogger(__name__)


class Checkpointer:
    """Saves checkpoints of one fit at the moments the config asks for."""

    def __init__(self, config: Any, store: CheckpointStore | None, job: dict, runtime: Any, sharded: bool = False,
                 on_commit: Any = None, on_save: Any = None, hyper_parameters: dict | None = None):
        """`sharded`: the model is sharded (FSDP), so checkpoints are directories of shards.
        `on_commit`: called after each local commit (a gs:// run directory publishes it then).
        `on_save(checkpoint)`: the module's on_save_checkpoint, which may add its own keys (plain data:
        tensors, numbers, strings, lists, dicts) to the host dict before it is written.
        `hyper_parameters`: what the module's save_hyperparameters() recorded, saved with every checkpoint."""
        self.config, self.store, self.job, self.runtime = config, store, job, runtime
        self.on_commit, self.on_save, self.hyper_parameters = on_commit, on_save, hyper_parameters
        self.sharded = sharded
        self.last_saved: tuple[int, int] | None = None  # (global_step, position epoch)
        self.last_path: Path | None = None
        if sharded and runtime.process_count > 1:
            raise UserError(
                f"sharded (FSDP) checkpoints across {runtime.process_count} hosts are not supported yet: every "
                "host would have to write its shards into one shared directory, and that path is untested "
                "(PJRT on CPU cannot emulate several hosts). Fix: train FSDP on one host, or use the data "
                "strategy on a pod."
            )

    def due_after_step(self, global_step: int, batches_done: int, epoch_len: int) -> bool:
        n = self.config.every_n_steps
        # the epoch's end saves itself
        return self.config.checkpointing and bool(n) and global_step % n == 0 and batches_done < epoch_len

    def due_after_epoch(self, epoch: int) -> bool:
        n = self.config.every_n_epochs
        return bool(n) and epoch % n == 0

    def reason_at_epoch_end(self, epoch: int, *, last: bool, stop_requested: bool) -> str | None:
        """Why a checkpoint is written at the end of `epoch` (None: no checkpoint is due)."""
        if stop_requested:
            return "preempted"  # with checkpointing off, save() writes nothing and the stop goes on
        if not self.config.checkpointing:
            return None
        if last:
            return "final"
        return "epoch" if self.due_after_epoch(epoch) else None

    def save(self, state: TrainState, *, global_step: int, position: tuple[int, int], epoch_start_rng: dict,
             reason: str, final: bool = False) -> Path | None:
        """Capture the device state (every process) and write it (the writing process only).

        `final`: the fit's last checkpoint (after the last epoch or at max_steps): final.ckpt.
        """
        if not self.config.checkpointing:
            return None
        epoch, batch = position
        if self.last_saved == (global_step, epoch):
            return self.last_path  # this exact state is already committed (e.g. SIGTERM right after a save)
        host = capture_training_state(state, self.runtime.device, with_model=not self.sharded)
        host.update(format=STATE_FORMAT, global_step=global_step, epoch=epoch - 1,
                    position={"epoch": epoch, "batch": batch}, epoch_start_rng=epoch_start_rng, config=self.job)
        if self.hyper_parameters:
            host["hyper_parameters"] = self.hyper_parameters
        if self.on_save:
            self.on_save(host)  # Lightning's on_save_checkpoint(checkpoint): its keys are written with ours
        self.last_saved = (global_step, epoch)
        if self.store is None:
            return None
        meta = {"global_step": global_step, "epoch": epoch - 1, "position": {"epoch": epoch, "batch": batch},
                "reason": reason}
        if self.sharded:
            name = FINAL_SHARDED if final else f"step-{global_step:08d}.dcp"
            entry = self.store.save_sharded(state.module, state.optimizer, host, name, meta)
        else:
            name = FINAL if final else f"step-{global_step:08d}.ckpt"
            entry = self.store.save(host, name, meta)
        self.last_path = self.store.directory / name
        if self.on_commit is not None:
            self.on_commit()
        log.info("checkpoint (%s): %s, step %d, sha256 %s", reason, self.last_path, global_step, entry["sha256"][:12])
        return self.last_path
