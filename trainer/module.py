"""`TrainModule`: what a user writes. Plain PyTorch, no XLA code.

A module is an `nn.Module` with three methods and optional hooks:

- `training_step(batch, batch_idx)` returns the loss (or Lightning's `{"loss": loss, ...}`):
  per-sample losses of shape [B] (e.g. `F.cross_entropy(..., reduction="none")`) let the
  engine mask the padded rows of a ragged last batch exactly; a scalar works too (padded
  rows then count in it, and the engine warns when that happens).
- `self.log(name, value, prog_bar=False)` / `self.log_dict({...})` in either step: tensors
  stay on the device and are read only at logging steps and the epoch's end; they appear
  in steps.csv (per logged step), metrics.csv (epoch means), TensorBoard and, with
  prog_bar, the progress bar.
- `validation_step(batch, batch_idx)` returns a dict of per-sample tensors ([B]) or
  scalars, e.g. `{"loss": losses, "accuracy": (pred == y).float()}`; the engine averages
  them over the real rows of the whole validation set, on the device.
- `configure_optimizers()` returns an optimizer, `(optimizer, scheduler)`, or Lightning's
  `{"optimizer": ..., "lr_scheduler": {"scheduler": s, "interval": "step"}}`. It is called
  after the move to the device, so it sees the device parameters; a scheduler steps per
  epoch unless its dict says `"interval": "step"` (`trainer.fit.schedules`).

Data: hand `DataLoader`s to `Trainer.fit`, or define `train_dataloader()` and
`val_dataloader()` (required when the job is started from the CLI).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn


class TrainModule(nn.Module):
    def log(self, name: str, value: Any, prog_bar: bool = False, **lightning_options: Any) -> None:
        """Record a metric from training_step or validation_step (Lightning's `self.log`)."""
        from trainer.fit.step_logs import logs_for

        logs_for(self, name).record(name, value, prog_bar, lightning_options)

    def log_dict(self, values: Mapping[str, Any], prog_bar: bool = False, **lightning_options: Any) -> None:
        for name, value in values.items():
            self.log(name, value, prog_bar, **lightning_options)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise NotImplementedError("a TrainModule must define training_step(batch, batch_idx) returning the loss")

    def validation_step(self, batch: Any, batch_idx: int) -> Mapping[str, torch.Tensor] | torch.Tensor:
        raise NotImplementedError("define validation_step(batch, batch_idx) to evaluate, or pass no val loader")

    def configure_optimizers(self) -> Any:
        raise NotImplementedError("a TrainModule must define configure_optimizers()")

    def train_dataloader(self) -> Any:
        raise NotImplementedError("pass train_dataloaders to Trainer.fit, or define train_dataloader()")

    def val_dataloader(self) -> Any:
        return None

    # Hooks: override any of them; the defaults do nothing.
    def on_post_move_to_device(self) -> None:
        """Called right after the move to the XLA device (and the engine's re-tying)."""

    def on_fit_start(self) -> None:
        """Called once before the first epoch, on the device, after the optimizer exists."""

    def on_train_epoch_start(self, epoch: int) -> None:
        """Called on the host before each epoch; do not read device tensors here."""

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """Called every step after backward (gradients exist, sharded like their parameters
        under FSDP) and before the optimizer step; traced like the step: no host reads."""

    def on_validation_epoch_end(self, epoch: int, metrics: Mapping[str, float]) -> None:
        """Called with the epoch's validation averages, already read to the host."""

    def on_fit_end(self) -> None:
        """Called once after training, before the final checkpoint is written."""
