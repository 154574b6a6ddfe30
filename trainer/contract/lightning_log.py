"""A LightningModule's own `self.log`, routed into the engine's `StepLogs`.

`LightningModule.log` is Lightning's code: it validates the call, turns numbers into
tensors, resolves on_step/on_epoch for the running hook (`module._current_fx_name`) and
then hands everything to `trainer._results.log(...)`. Lightning's contract gives a module
its trainer by assignment (`module.trainer = ...`) and names the running hook in
`module._current_fx_name` around every hook call; the engine does both, exactly as
Lightning's Trainer does (and clears both when the fit ends), and patches nothing: the
trainer it assigns is this view, whose `_results` records into the fit's StepLogs. The
other private names here are what `log`, `print`, `optimizers()` and `lr_schedulers()`
read on a trainer, answered for one process on an SPMD mesh.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from trainer.contract.trainer_view import FitFacts, TrainerView


class _Results:
    """Lightning's result collection, as `LightningModule.log` calls it."""

    def __init__(self, logs: Any):
        self.logs = logs

    def log(self, fx: str, name: str, value: Any, *, prog_bar: bool = False, on_step: bool = False,
            on_epoch: bool = True, reduce_fx: Any = "mean", **ignored: Any) -> None:
        # sync_dist, batch_size, ...: under SPMD a logged value is already global, and the engine
        # weighs validation means by each batch's real rows.
        self.logs.record_resolved(name, value, prog_bar, on_step, on_epoch, reduce_fx)

    def reset(self, *args: Any, **kwargs: Any) -> None:
        """Lightning clears per-hook tensors here; the engine's StepLogs are taken every step instead."""


class _LoggerConnector:
    _current_fx: str | None = None

    @staticmethod
    def should_reset_tensors(fx: str) -> bool:
        return False


class _Strategy:
    def __init__(self, facts: FitFacts):
        self._facts = facts

    @property
    def _lightning_optimizers(self) -> list:
        return list(self._facts.optimizers)

    @property
    def root_device(self) -> Any:
        return self._facts.device

    @staticmethod
    def reduce(value: Any, *args: Any, **kwargs: Any) -> Any:
        return value  # SPMD: one program sees the global batch, nothing to reduce across processes

    @staticmethod
    def barrier(*args: Any, **kwargs: Any) -> None:
        return None


class LightningTrainerView(TrainerView):
    """The view a LightningModule gets as `module.trainer`, with what Lightning's own code reads."""

    def __init__(self, facts: FitFacts, logs: Any):
        super().__init__(facts)
        object.__setattr__(self, "_results", _Results(logs))
        object.__setattr__(self, "_logger_connector", _LoggerConnector())
        object.__setattr__(self, "_accelerator_connector", SimpleNamespace(is_distributed=False))
        object.__setattr__(self, "strategy", _Strategy(facts))
        object.__setattr__(self, "barebones", False)
