"""Where a fit is: the epoch, the batches done in it, and the optimizer steps done in all.

One small object that every part asks instead of keeping its own count: the loop
advances it, checkpoints record its position, a resumed run restores it, and the
decisions that depend on it (is this a logging step, is a step checkpoint due, is the
epoch a resumed one) are its methods. With gradient accumulation a
batch is not a step: `batch` counts batches, `global_step` optimizer steps, and the
batches of an epoch fall into windows of `accumulate` (the last one may be shorter).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Progress:
    max_epochs: int
    log_every_n_steps: int
    accumulate: int = 1
    """Batches per optimizer step."""
    max_steps: int = -1
    """Stop after this many optimizer steps (-1: no limit)."""
    val_every: int = 0
    """Validate every this many optimizer steps inside an epoch (0: at the epoch's end only)."""
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

    def resumed(self, epoch: int, batch: int, global_step: int) -> "Progress":
        """The same settings, at a checkpoint's position."""
        return Progress(self.max_epochs, self.log_every_n_steps, self.accumulate, self.max_steps, self.val_every,
                        epoch=epoch, batch=batch, global_step=global_step, resumed_batches=batch)

    def epochs(self) -> range:
        """The epochs still to run (empty when a checkpoint already finished them all, or the step budget)."""
        return range(self.epoch, self.max_epochs + 1) if not self.done else range(0)

    def start_epoch(self, epoch: int, epoch_len: int) -> int:
        """Enter `epoch` of `epoch_len` batches; returns how many to skip (non-zero only when resuming mid-epoch)."""
        skip = self.resumed_batches if epoch == self.first_epoch else 0
        self.epoch, self.batch, self.epoch_len = epoch, skip, epoch_len
        return skip

    def window_of(self, index: int) -> range:
        """The batches of the epoch that share an optimizer step with batch `index`."""
        start = index - index % self.accumulate
        return range(start, min(start + self.accumulate, self.epoch_len))

    def window_ends_at(self, index: int) -> bool:
        """Batch `index` is the last of its window: the optimizer steps after it."""
        return index + 1 == self.window_of(index).stop

    def batch_done(self, optimizer_stepped: bool) -> None:
        self.batch += 1
        if optimizer_stepped:
            self.global_step += 1

    @property
    def done(self) -> bool:
        """The step budget (max_steps) is spent."""
        return 0 <= self.max_steps <= self.global_step

    @property
    def validation_due(self) -> bool:
        """A mid-epoch validation is due after this optimizer step (never at the epoch's last batch)."""
        return bool(self.val_every) and self.global_step % self.val_every == 0 and self.batch < self.epoch_len

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


def validation_every(interval: Any, epoch_batches: int, accumulate: int) -> int:
    """val_check_interval as optimizer steps between mid-epoch validations (0: epoch end only).

    An integer is already a step count; a fraction of an epoch is rounded to whole optimizer
    steps of an epoch of `epoch_batches` batches (at least 1), and 1.0 means the end only."""
    if isinstance(interval, float):
        steps = -(-epoch_batches // accumulate)
        return 0 if interval >= 1.0 else max(1, round(interval * steps))
    return interval
