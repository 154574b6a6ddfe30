"""`self.log` inside a user's step: what was logged, held by the engine, not the module.

The engine attaches a `StepLogs` to the module for the length of a fit (`attached`); a
module's `self.log` finds it through `logs_for(module)`. The registry is keyed weakly by
the module object, so nothing is written into the user's module and nothing outlives it.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator, Mapping

import torch

from trainer.errors import UserError

_ATTACHED: "weakref.WeakKeyDictionary[Any, StepLogs]" = weakref.WeakKeyDictionary()


class StepLogs:
    """What `self.log` recorded during one step (taken by the loop after the step)."""

    _ACCEPTED = {"on_step", "on_epoch", "logger", "sync_dist", "batch_size", "reduce_fx", "rank_zero_only"}

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.prog_bar: set[str] = set()

    def record(self, name: str, value: Any, prog_bar: bool, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - self._ACCEPTED)
        if unknown:
            raise UserError(
                f"self.log({name!r}, ...) got {', '.join(unknown)}, which tpu-trainer does not support. It accepts "
                "prog_bar and Lightning's on_step, on_epoch, logger, sync_dist, batch_size, rank_zero_only and "
                "reduce_fx='mean' (values are logged per step and averaged per epoch; under SPMD they are already "
                "global, so sync_dist changes nothing). Fix: drop those arguments."
            )
        if options.get("reduce_fx", "mean") not in ("mean", torch.mean):
            raise UserError(f"self.log({name!r}, ..., reduce_fx={options['reduce_fx']!r}): only the mean is supported.")
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise UserError(f"self.log({name!r}, ...) got a tensor of shape {tuple(value.shape)}; log one number "
                                "(e.g. .mean()), or return per-sample values from validation_step.")
            value = value.detach().float().reshape(())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)  # a host number stays on the host: no graph constant
        else:
            raise UserError(f"self.log({name!r}, ...) got a {type(value).__name__}; log a number or a one-element tensor.")
        self.values[name] = value
        if prog_bar:
            self.prog_bar.add(name)

    def take(self) -> dict[str, Any]:
        values, self.values = self.values, {}
        return values


@contextlib.contextmanager
def attached(module: Any, logs: StepLogs) -> Iterator[StepLogs]:
    """`module`'s self.log writes into `logs` while the block runs (a fit)."""
    _ATTACHED[module] = logs
    try:
        yield logs
    finally:
        _ATTACHED.pop(module, None)


def logs_for(module: Any, name: str) -> StepLogs:
    """Where `module.log(name, ...)` writes; a UserError outside a fit."""
    logs = _ATTACHED.get(module)
    if logs is None:
        raise UserError(f"self.log({name!r}, ...) was called outside a fit: it records values from "
                        "training_step and validation_step while Trainer.fit runs.")
    return logs
