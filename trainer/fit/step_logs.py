"""`self.log` inside a user's hooks and steps: what was logged, held by the engine, not the module.

The engine attaches a `StepLogs` (and the module's read-only `self.trainer` view) to the
module for the length of a fit (`attached`); a TrainModule's `self.log` finds it through
`logs_for(module)`, a LightningModule's own `log` through the view it was given as
`module.trainer` (`trainer.contract.lightning_log`). The registry is keyed weakly by the
module object, so nothing outlives it.

Lightning's defaults per hook: in training_step and the batch hooks around it a value is
logged per step (on_step=True, on_epoch=False), in validation_step and the epoch hooks
per epoch (on_step=False, on_epoch=True). Every training value also gets an epoch
value in metrics.csv (reduced with reduce_fx), as before: it costs nothing on the device.
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from trainer.contract.lightning import is_metric
from trainer.errors import UserError

_ATTACHED: "weakref.WeakKeyDictionary[Any, StepLogs]" = weakref.WeakKeyDictionary()

STEP, EPOCH, NONE = (True, False), (False, True), None
DEFAULTS = {  # hook -> Lightning's (on_step, on_epoch) defaults; None: self.log is not allowed there
    **dict.fromkeys(("training_step", "on_train_batch_start", "on_train_batch_end", "on_before_zero_grad",
                     "on_before_backward", "on_after_backward", "on_before_optimizer_step"), STEP),
    **dict.fromkeys(("validation_step", "on_validation_batch_start", "on_validation_batch_end", "test_step",
                     "on_test_batch_start", "on_test_batch_end"), EPOCH),
    **dict.fromkeys(("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_validation_start",
                     "on_validation_epoch_start", "on_validation_epoch_end", "on_test_start", "on_test_epoch_start",
                     "on_test_epoch_end"), EPOCH),
}
EPOCH_HOOKS = frozenset(("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_validation_start",
                         "on_validation_epoch_start", "on_validation_epoch_end", "on_test_start",
                         "on_test_epoch_start", "on_test_epoch_end"))
REDUCTIONS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min",
              torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min"}


def phase_of(hook: str) -> str:
    """"val", "test" or "train": whose epoch values a name logged in `hook` belongs to."""
    return "val" if "validation" in hook else "test" if "test" in hook else "train"


@dataclass(frozen=True)
class LogOptions:
    on_step: bool
    on_epoch: bool
    reduce: str
    """mean, sum, max or min: how the epoch value is made from the step values."""


class StepLogs:
    """What `self.log` recorded since the loop last took it, and how each name is reduced."""

    def __init__(self, view: Any = None) -> None:
        self.view = view
        """The module's `self.trainer` (a `trainer.contract.trainer_view.TrainerView`)."""
        self.current = "training_step"
        """The hook or step running now (set by `trainer.contract.hooks.Hooks`)."""
        self.values: dict[str, Any] = {}
        self.epoch_values: dict[str, Any] = {}
        """What epoch-level hooks (on_train_epoch_end, ...) logged: one value per name and epoch."""
        self.options: dict[str, LogOptions] = {}
        self.metrics: dict[str, tuple[Any, str]] = {}
        """torchmetrics Metric objects logged by name, with their phase ("train", "val", "test"): computed at the
        end of that phase's epoch, then reset."""
        self.prog_bar: set[str] = set()

    def record(self, name: str, value: Any, prog_bar: bool = False, on_step: bool | None = None,
               on_epoch: bool | None = None, reduce_fx: Any = "mean") -> None:
        """A TrainModule's self.log: Lightning's defaults for the running hook, then `record_resolved`."""
        defaults = DEFAULTS.get(self.current, NONE)
        if defaults is None:
            raise UserError(
                f"self.log({name!r}, ...) was called in {self.current}, where Lightning does not allow logging "
                "either: values are logged from training_step, validation_step and the batch and epoch hooks. "
                "Fix: log it from one of those (e.g. on_train_epoch_end).")
        on_step = defaults[0] if on_step is None else on_step
        on_epoch = defaults[1] if on_epoch is None else on_epoch
        if self.current in EPOCH_HOOKS and on_step:
            raise UserError(f"self.log({name!r}, ..., on_step=True) in {self.current}: an epoch hook logs once per "
                            "epoch (Lightning refuses it too). Fix: drop on_step=True.")
        self.record_resolved(name, value, prog_bar, on_step, on_epoch, reduce_fx)

    def record_resolved(self, name: str, value: Any, prog_bar: bool, on_step: bool, on_epoch: bool,
                        reduce_fx: Any) -> None:
        reduce = REDUCTIONS.get(reduce_fx)
        if reduce is None:
            raise UserError(
                f"self.log({name!r}, ..., reduce_fx={getattr(reduce_fx, '__name__', reduce_fx)!r}): tpu-trainer "
                "reduces logged values on the device with 'mean', 'sum', 'max' or 'min' (or torch.mean, torch.sum, "
                "torch.max, torch.min). Fix: use one of those, or log the reduced value yourself.")
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise UserError(f"self.log({name!r}, ...) got a tensor of shape {tuple(value.shape)}; log one number "
                                "(e.g. .mean()), or return per-sample values from validation_step.")
            value = value.detach().float().reshape(())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)  # a host number stays on the host: no graph constant
        elif is_metric(value):
            self.metrics[name] = (value, phase_of(self.current))
            value = getattr(value, "_forward_cache", None)  # this step's value, when forward() made one
            if not isinstance(value, torch.Tensor) or not on_step:
                value = None
            else:
                value = value.detach().float().reshape(())
        else:
            raise UserError(f"self.log({name!r}, ...) got a {type(value).__name__}; log a number, a one-element "
                            "tensor or a torchmetrics Metric.")
        if name not in self.options:
            self.options[name] = LogOptions(on_step, on_epoch, reduce)
        if value is not None:
            (self.epoch_values if self.current in EPOCH_HOOKS else self.values)[name] = value
        if prog_bar:
            self.prog_bar.add(name)

    def take(self) -> dict[str, Any]:
        values, self.values = self.values, {}
        return values

    def take_epoch_values(self) -> dict[str, Any]:
        values, self.epoch_values = self.epoch_values, {}
        return values

    def step_names(self, names: Any) -> list[str]:
        """Those of `names` logged with on_step (what a logged step reports)."""
        options = self.options
        return [n for n in names if n not in options or options[n].on_step]

    def has_epoch_value(self, name: str) -> bool:
        """Logged with on_epoch (or the engine's own value): Lightning's callback_metrics holds its epoch value."""
        options = self.options.get(name)
        return options is None or options.on_epoch

    def reduction(self, name: str) -> str:
        options = self.options.get(name)
        return options.reduce if options is not None else "mean"

    def compute_metrics(self, phase: str) -> dict[str, torch.Tensor]:
        """The epoch values (compute()) of the Metric objects logged in `phase`, then reset for the next epoch."""
        out = {}
        for name, (metric, logged_in) in list(self.metrics.items()):
            if logged_in != phase:
                continue
            if getattr(metric, "update_count", getattr(metric, "_update_count", 1)):
                out[name] = metric.compute().detach().float().reshape(())
            metric.reset()
        return out


@contextlib.contextmanager
def attached(module: Any, logs: StepLogs) -> Iterator[StepLogs]:
    """`module`'s self.log writes into `logs` (and its self.trainer is `logs.view`) while the block runs."""
    _ATTACHED[module] = logs
    try:
        yield logs
    finally:
        _ATTACHED.pop(module, None)


def attachment(module: Any) -> StepLogs | None:
    return _ATTACHED.get(module)


def logs_for(module: Any, name: str) -> StepLogs:
    """Where `module.log(name, ...)` writes; a UserError outside a fit."""
    logs = _ATTACHED.get(module)
    if logs is None:
        raise UserError(f"self.log({name!r}, ...) was called outside a fit: it records values from "
                        "training_step, validation_step and the hooks while Trainer.fit runs.")
    return logs
