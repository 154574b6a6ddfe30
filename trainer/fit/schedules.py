"""What `configure_optimizers` returns, and when its learning-rate scheduler steps.

Accepted, as in Lightning: an optimizer; `(optimizer, scheduler)`; `([optimizer],
[scheduler])`; or `{"optimizer": o, "lr_scheduler": s | {"scheduler": s, "interval":
"step" | "epoch", "frequency": n, "monitor": "val_loss"}}`. A bare scheduler steps per
epoch (Lightning's default); `interval: "step"` steps it after every `frequency`
optimizer steps. Ignoring that dict would step a warm-up once per epoch: a whole first
epoch at learning rate 0.

The optimizer itself is left as the user built it: the loop calls `optimizer_step()` for
whatever the engine does around `optimizer.step()` (`trainer.fit.optimizer_step`: why, and
what it costs), `after_restore()` once a checkpoint's state is loaded, and steps the
scheduler through `after_optimizer_step` / `after_epoch`. Rates stay the user's Python
floats, so the scheduler computes them exactly as on the CPU.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from trainer.errors import UserError
from trainer.fit.optimizer_step import ConfiguredGroups, check_optimizer, step, undo_legacy_rewrites

log = logging.getLogger(__name__)

INTERVALS = ("step", "epoch")


@dataclass
class LrSchedule:
    """The run's scheduler and when it steps; `None` scheduler: a constant rate."""

    optimizer: torch.optim.Optimizer
    scheduler: Any = None
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and self.monitor is None:
            self.monitor = "val_loss"  # Lightning's habit: it needs a metric, and this is the usual one
        check_optimizer(self.optimizer)
        self.configured = ConfiguredGroups.of(self.optimizer)

    def optimizer_step(self) -> None:
        """Everything the engine does around `optimizer.step()` (the loop zeroes the gradients after)."""
        step(self.optimizer)

    def after_restore(self) -> None:
        """Call once a checkpoint's optimizer (and scheduler) state is loaded."""
        if undo_legacy_rewrites(self.optimizer, self.configured):
            log.info("the checkpoint's optimizer groups were rewritten by an older tpu-trainer (weight_decay 0, "
                     "capturable, a rate of 0 stored as 1e-12); continuing with the settings configure_optimizers "
                     "gives")

    def logged_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def after_optimizer_step(self, global_step: int) -> None:
        if self.scheduler is not None and self.interval == "step" and global_step % self.frequency == 0:
            self.scheduler.step()

    def after_epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        if self.scheduler is None or self.interval != "epoch" or epoch % self.frequency:
            return
        if self.monitor is not None:
            if self.monitor not in metrics:
                raise UserError(
                    f"the lr_scheduler monitors {self.monitor!r}, but the epoch's metrics are {sorted(metrics)}. "
                    "Fix: set 'monitor' to one of them (e.g. 'val_loss'), or log it with self.log."
                )
            self.scheduler.step(metrics[self.monitor])
        else:
            self.scheduler.step()


def optimizers(configured: Any) -> LrSchedule:
    """Parse what `configure_optimizers()` returned; a UserError names anything else."""
    if isinstance(configured, torch.optim.Optimizer):
        return LrSchedule(configured)
    if isinstance(configured, Mapping) and "optimizer" in configured:
        return _from_dict(configured)
    if isinstance(configured, (tuple, list)) and len(configured) == 2:
        optimizer, scheduler = configured
        if isinstance(optimizer, (list, tuple)) and isinstance(scheduler, (list, tuple)):  # ([opt], [sched])
            if len(optimizer) != 1 or len(scheduler) > 1:
                raise UserError("configure_optimizers() returned several optimizers or schedulers; tpu-trainer "
                                "trains with one optimizer and at most one scheduler. Fix: return one of each.")
            optimizer, scheduler = optimizer[0], (scheduler[0] if scheduler else None)
        if isinstance(optimizer, torch.optim.Optimizer):
            if isinstance(scheduler, Mapping):
                return _from_dict({"optimizer": optimizer, "lr_scheduler": scheduler})
            return LrSchedule(optimizer, scheduler)
    raise UserError(
        "configure_optimizers() must return an optimizer, (optimizer, lr_scheduler), or Lightning's "
        "{'optimizer': ..., 'lr_scheduler': {'scheduler': ..., 'interval': 'step'}}; it returned "
        f"{type(configured).__name__}."
    )


def _from_dict(configured: Mapping) -> LrSchedule:
    unknown = sorted(set(configured) - {"optimizer", "lr_scheduler", "monitor"})
    if unknown:
        raise UserError(f"configure_optimizers() returned a dict with {unknown}; allowed keys: optimizer, "
                        "lr_scheduler, monitor.")
    spec = configured.get("lr_scheduler")
    if spec is None or not isinstance(spec, Mapping):
        return LrSchedule(configured["optimizer"], spec, monitor=configured.get("monitor"))
    allowed = {"scheduler", "interval", "frequency", "monitor", "name", "strict", "reduce_on_plateau"}
    unknown = sorted(set(spec) - allowed)
    if unknown or "scheduler" not in spec:
        raise UserError(
            f"the lr_scheduler dict has {unknown or 'no scheduler'}; it takes Lightning's keys scheduler (required), "
            "interval ('step' or 'epoch'), frequency, monitor, name and strict."
        )
    interval, frequency = spec.get("interval", "epoch"), spec.get("frequency", 1)
    if interval not in INTERVALS:
        raise UserError(f"lr_scheduler interval {interval!r} is not 'step' or 'epoch'. Fix the dict.")
    if type(frequency) is not int or frequency < 1:
        raise UserError(f"lr_scheduler frequency {frequency!r} must be an integer >= 1.")
    monitor = spec.get("monitor", configured.get("monitor"))
    scheduler = spec["scheduler"]
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        if interval != "epoch":
            raise UserError("ReduceLROnPlateau steps on a metric read at the epoch's end; use interval 'epoch' "
                            "(a per-step read would stall the device every step).")
        monitor = monitor or "val_loss"
    else:
        monitor = None  # only ReduceLROnPlateau takes a metric
    return LrSchedule(configured["optimizer"], scheduler, interval, frequency, monitor)
