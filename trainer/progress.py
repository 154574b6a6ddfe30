"""Where a fit is: the epoch, the batches done in it, and the optimizer steps done in all.

One small object that every part asks instead of keeping its own count: the loop
advances it, checkpoints record its position, a resumed run restores it, and the
decisions that depend on it (is this a logging step, is a step checkpoint due, is the
epoch a resumed one) are its methods. Later features (gradient accumulation, a step
budget, validation every N steps) change the counting here, in one place.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Progress:
    max_epochs: int
    log_every_n_steps: int
    epoch: int = 1
    """The epoch the next batch belongs to (1-based)."""
    batch: int = 0
    """Batches of `epoch` already done."""
    global_step: int = 0
    """Optimizer steps done in the whole run (what logs, schedules and checkpoints count)."""
    resumed_batches: int = 0
    """Batches of the first epoch a resumed run skips (done before the interruption)."""

    def __post_init__(self) -> None:
        self.first_epoch = self.epoch  # this process's first epoch (a resumed run's is the checkpoint's)

    @classmethod
    def resumed(cls, max_epochs: int, log_every_n_steps: int, epoch: int, batch: int, global_step: int) -> "Progress":
        return cls(max_epochs, log_every_n_steps, epoch=epoch, batch=batch, global_step=global_step,
                   resumed_batches=batch)

    def epochs(self) -> range:
        """The epochs still to run (empty when a checkpoint already finished them all)."""
        return range(self.epoch, self.max_epochs + 1)

    def start_epoch(self, epoch: int) -> int:
        """Enter `epoch`; returns how many of its batches to skip (non-zero only when resuming mid-epoch)."""
        skip = self.resumed_batches if epoch == self.first_epoch else 0
        self.epoch, self.batch = epoch, skip
        return skip

    def step_done(self) -> None:
        """One batch trained and one optimizer step taken."""
        self.batch += 1
        self.global_step += 1

    @property
    def logging_step(self) -> bool:
        """Read the loss to the host after this step (asynchronously)."""
        return self.global_step % self.log_every_n_steps == 0

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, batches done in it): where a checkpoint taken now resumes."""
        return self.epoch, self.batch

    def end_epoch(self) -> None:
        """The epoch is complete: the next position is the start of the next one."""
        self.epoch, self.batch = self.epoch + 1, 0
