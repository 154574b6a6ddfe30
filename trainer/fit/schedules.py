"""What `configure_optimizers` returns, and when its learning-rate scheduler steps.

Accepted, as in Lightning: an optimizer; `(optimizer, scheduler)`; `([optimizer],
[scheduler])`; or `{"optimizer": o, "lr_scheduler": s | {"scheduler": s, "interval":
"step" | "epoch", "frequency": n, "monitor": "val_loss"}}`. A bare scheduler steps per
epoch (Lightning's default); `interval: "step"` steps it after every `frequency`
optimizer steps. Ignoring that dict would step a warm-up once per epoch: a whole first
epoch at learning rate 0.

A learning rate that changes every step must not change the XLA graph. torch_xla turns
a Python number into device data, except where it treats it as a constant: exactly 0.0
and 1.0 ("special scalars"), and AdamW's decoupled decay factor `1 - lr * weight_decay`,
which rounds to exactly 1.0 in float32 once lr * weight_decay < 3e-8 (late in a decay to
0). Measured with a per-step warm-up from 0 + cosine to 0, torch_xla 2.9: a compilation
when the rate leaves 0, one when the decay factor first rounds to 1.0, one when the rate
reaches 0 again; and with Adam's beta2 = 0.95 (GPT recipes) another at step 325, when the
bias correction it computes in Python rounds to 1.0. So the engine (1) runs with
`XLA_NO_SPECIAL_SCALARS=1` (env profiles), (2) switches Adam-family optimizers to
`capturable=True`, which keeps the step count and bias corrections on the device, and
(3) applies AdamW's decoupled weight decay itself, before the optimizer step, with the
factor sent to the device as a one-element tensor (a 0-d upload of exactly 1.0 is folded
into a constant too): the same arithmetic, no constant. Capturable Adam divides by the
step size, so a rate of exactly 0 would give NaN there: for those groups a rate of 0 is
handed over as 1e-12 (an update that moves no float32 parameter larger than about 1e-3);
logs show 0.0. Measured after
both: no compilation after warm-up over the whole schedule.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from trainer.errors import UserError

log = logging.getLogger(__name__)

INTERVALS = ("step", "epoch")
ZERO_LR_STAND_IN = 1e-12


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
        self.weight_decay = [0.0] * len(self.optimizer.param_groups)
        self.keep_numbers_on_device()

    def keep_numbers_on_device(self) -> None:
        """Capturable Adam (step and bias corrections on the device); decoupled weight decay moved
        out of the optimizer into `decay_parameters`. Call again after loading the optimizer's state
        from a checkpoint: that restores the saved groups."""
        adam = isinstance(self.optimizer, torch.optim.Adam)  # AdamW is one; others are untested here
        for index, group in enumerate(self.optimizer.param_groups):
            if group.get("decoupled_weight_decay") and group.get("weight_decay"):
                self.weight_decay[index] = float(group["weight_decay"])
                group["weight_decay"] = 0.0
            if adam and group.get("capturable") is False and not group.get("fused") and not group.get("foreach"):
                group["capturable"] = True
                for param in group["params"]:  # a step count saved on the host goes to its parameter
                    state = self.optimizer.state.get(param, {})
                    if isinstance(state.get("step"), torch.Tensor) and state["step"].device != param.device:
                        state["step"] = state["step"].to(param.device)
        self._keep_capturable_lr_off_zero()

    def decay_parameters(self, device: Any) -> None:
        """AdamW's `param *= 1 - lr * weight_decay`, with the factor as device data (before the step)."""
        for group, decay in zip(self.optimizer.param_groups, self.weight_decay):
            if decay:
                # one element, not a 0-d tensor: torch_xla folds a 0-d upload of exactly 1.0 into a constant
                factor = torch.tensor([1 - group["lr"] * decay], dtype=torch.float32).to(device)
                with torch.no_grad():  # an optimizer's update, as inside optimizer.step()
                    for param in group["params"]:
                        if param.grad is not None:
                            param.mul_(factor)

    def optimizer_step(self) -> None:
        """Everything the engine does around `optimizer.step()` (the loop calls this, then zero_grad)."""
        self.decay_parameters(self.optimizer.param_groups[0]["params"][0].device)
        self.optimizer.step()

    def after_restore(self) -> None:
        """After a checkpoint's optimizer and scheduler state were loaded."""
        self.keep_numbers_on_device()  # the restored groups are the optimizer's own again

    def logged_lr(self) -> float:
        group = self.optimizer.param_groups[0]
        return 0.0 if group.get("_tpu_trainer_lr_is_zero") else float(group["lr"])

    def _keep_capturable_lr_off_zero(self) -> None:
        for group in self.optimizer.param_groups:
            if group["lr"] == ZERO_LR_STAND_IN and group.get("_tpu_trainer_lr_is_zero"):
                continue  # already standing in for 0 (called again without a scheduler step, or after a resume)
            group["_tpu_trainer_lr_is_zero"] = group["lr"] == 0.0
            if group["lr"] == 0.0 and group.get("capturable"):
                group["lr"] = ZERO_LR_STAND_IN

    def after_optimizer_step(self, global_step: int) -> None:
        if self.scheduler is not None and self.interval == "step" and global_step % self.frequency == 0:
            self.scheduler.step()
            self._keep_capturable_lr_off_zero()

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
        self._keep_capturable_lr_off_zero()


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
