"""`TrainModule`: what a user writes. Plain PyTorch, no XLA code, Lightning's contract.

A module is an `nn.Module` with three methods and optional hooks (a `LightningModule`
works unchanged too: `trainer.contract`):

- `training_step(batch, batch_idx)` returns the loss (or Lightning's `{"loss": loss, ...}`):
  per-sample losses of shape [B] (e.g. `F.cross_entropy(..., reduction="none")`) let the
  engine mask the padded rows of a ragged last batch exactly; a scalar works too (padded
  rows then count in it, and the engine warns when that happens).
- `self.log(name, value, prog_bar=False, on_step=None, on_epoch=None, reduce_fx="mean")` /
  `self.log_dict({...})`, with Lightning's defaults per hook (per step in training_step and
  the batch hooks, per epoch in validation_step and the epoch hooks). Values may be tensors
  (they stay on the device and are read only at logging steps and the epoch's end), numbers
  (they stay on the host), or torchmetrics `Metric` objects (computed at the epoch's end).
  They appear in steps.csv (per logged step), metrics.csv (epoch values), TensorBoard, the
  progress bar (prog_bar) and `self.trainer.callback_metrics`.
- `validation_step(batch, batch_idx)` returns a dict of per-sample tensors ([B]) or
  scalars, e.g. `{"loss": losses, "accuracy": (pred == y).float()}`, or nothing when it only
  logs; the engine averages over the real rows of the whole validation set, on the device.
- `configure_optimizers()` returns one optimizer, `(optimizer, scheduler)`, or Lightning's
  `{"optimizer": ..., "lr_scheduler": {"scheduler": s, "interval": "step"}}`. It is called
  after the move to the device (it sees the device parameters) with `self.trainer` attached
  (`self.trainer.max_epochs`, `self.trainer.estimated_stepping_batches` work there).

Data: hand `DataLoader`s or a `LightningDataModule` to `Trainer.fit`, or define
`train_dataloader()` and `val_dataloader()` (required when the job is started from the CLI),
with `prepare_data()` / `setup(stage)` to build them.

Hooks take Lightning's signatures and run in Lightning's order (`trainer.contract.hooks`).
TRACED hooks run while a step's graph is recorded and must not read device values to the
host (`.item()`, `print(tensor)`, `if tensor > 0`): each read stalls the step, and `--debug`
names its line. HOST hooks run between graphs, where a read costs one transfer.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping

import torch
from torch import nn


class TrainModule(nn.Module):
    # ---- what the engine gives the module while it is fitted

    @property
    def trainer(self) -> Any:
        """A read-only view of the fit (`trainer.contract.trainer_view.TrainerView`); raises outside a fit."""
        from trainer.fit.step_logs import attachment

        logs = attachment(self)
        if logs is None:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer (self.trainer exists while "
                               "Trainer.fit runs).")
        return logs.view

    @property
    def current_epoch(self) -> int:
        """Epochs completed (0 during the first, as in Lightning); 0 outside a fit."""
        from trainer.fit.step_logs import attachment

        return self.trainer.current_epoch if attachment(self) is not None else 0

    @property
    def global_step(self) -> int:
        """Optimizer steps done; 0 outside a fit."""
        from trainer.fit.step_logs import attachment

        return self.trainer.global_step if attachment(self) is not None else 0

    @property
    def device(self) -> torch.device:
        """Where the module's parameters are (the XLA device once fitting)."""
        for tensor in self.parameters():
            return tensor.device
        for tensor in self.buffers():
            return tensor.device
        return torch.device("cpu")

    @property
    def hparams(self) -> Mapping[str, Any]:
        """What save_hyperparameters() recorded ({} before)."""
        return self.__dict__.get("_hparams", {})

    def save_hyperparameters(self, *names: str, ignore: Any = ()) -> None:
        """Record the `__init__` arguments (those named, less `ignore`) as `self.hparams`; they are saved
        with every checkpoint and in the run's config.yaml. Call it from `__init__`, as in Lightning."""
        from trainer.contract.hparams import init_arguments

        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        ignore = [ignore] if isinstance(ignore, str) else list(ignore)
        self.__dict__["_hparams"] = init_arguments(caller, names, ignore) if caller is not None else {}

    def log(self, name: str, value: Any, prog_bar: bool = False, logger: Any = None, on_step: bool | None = None,
            on_epoch: bool | None = None, reduce_fx: Any = "mean", enable_graph: bool = False,
            sync_dist: bool = False, sync_dist_group: Any = None, add_dataloader_idx: bool = True,
            batch_size: int | None = None, metric_attribute: str | None = None, rank_zero_only: bool = False) -> None:
        """Record a metric (Lightning's `self.log`; under SPMD a value is already global, so sync_dist changes
        nothing, and validation means are weighed by each batch's real rows, so batch_size is not needed)."""
        from trainer.fit.step_logs import logs_for

        logs_for(self, name).record(name, value, prog_bar, on_step, on_epoch, reduce_fx)

    def log_dict(self, dictionary: Mapping[str, Any], prog_bar: bool = False, logger: Any = None,
                 on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: Any = "mean",
                 **lightning_options: Any) -> None:
        for name, value in dictionary.items():
            self.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, **lightning_options)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """print() on the first process only (Lightning's self.print)."""
        from trainer.fit.step_logs import attachment

        if attachment(self) is None or self.trainer.is_global_zero:
            print(*args, **kwargs)

    # ---- what the user defines

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise NotImplementedError("a TrainModule must define training_step(batch, batch_idx) returning the loss")

    def validation_step(self, batch: Any, batch_idx: int) -> Mapping[str, torch.Tensor] | torch.Tensor | None:
        raise NotImplementedError("define validation_step(batch, batch_idx) to evaluate, or pass no val loader")

    def configure_optimizers(self) -> Any:
        raise NotImplementedError("a TrainModule must define configure_optimizers()")

    def train_dataloader(self) -> Any:
        raise NotImplementedError("pass train_dataloaders to Trainer.fit, or define train_dataloader()")

    def val_dataloader(self) -> Any:
        return None

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Trainer.predict's step; as in Lightning, the default is the module's forward on the batch."""
        return self(batch)

    # ---- hooks: override any of them; the defaults do nothing and are never called.
    # HOST: between graphs (a device read costs one transfer). TRACED: inside a step's graph (no reads).

    def prepare_data(self) -> None:
        """HOST, once, before setup: download or write files (no state: Lightning runs it on one process)."""

    def setup(self, stage: str) -> None:
        """HOST, with stage "fit", before configure_model: build datasets, split them."""

    def configure_model(self) -> None:
        """HOST, after setup and before configure_optimizers: build large layers here. They are created on
        the XLA device (never whole on the host) and, under FSDP, sharded as they are created."""

    def on_post_move_to_device(self) -> None:
        """HOST, right after the move to the XLA device (and the engine's re-tying of shared weights)."""

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """HOST, a resumed run only, before the state is restored: read the keys on_save_checkpoint added."""

    def on_fit_start(self) -> None:
        """HOST, once before the dataloaders are made and training starts (the optimizer exists)."""

    def on_train_start(self) -> None:
        """HOST, once after the dataloaders are made, before the first epoch."""

    def on_train_epoch_start(self) -> None:
        """HOST, before each epoch's batches (the epoch: self.current_epoch, 0-based)."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """TRACED, before training_step (the batch is already on the device)."""

    def on_before_zero_grad(self, optimizer: Any) -> None:
        """TRACED, after the training_step of a window's first batch, where Lightning zeroes the gradients
        (the engine has already freed the last step's gradients, right after that optimizer step)."""

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """TRACED, with the batch's loss (the mean over its real rows), before backward."""

    def on_after_backward(self) -> None:
        """TRACED, after backward (gradients exist; under accumulation, summed so far)."""

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        """TRACED, at a window's end after clipping (the gradients the optimizer uses; sharded like their
        parameters under FSDP), before the optimizer step."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """TRACED, after the optimizer step; `outputs` is training_step's dict (or {"loss": loss}), detached."""

    def on_validation_start(self) -> None:
        """HOST, before each validation (epoch end, and every val_check_interval)."""

    def on_validation_epoch_start(self) -> None:
        """HOST, right after on_validation_start."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int) -> None:
        """TRACED, before validation_step."""

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """TRACED, with what validation_step returned."""

    def on_validation_epoch_end(self) -> None:
        """HOST, after the validation set: its averages are in self.trainer.callback_metrics."""

    def on_validation_end(self) -> None:
        """HOST, after on_validation_epoch_end."""

    def on_train_epoch_end(self) -> None:
        """HOST, after the epoch's batches and its validation, before its checkpoint."""

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """HOST, before a checkpoint is written: add your own keys (plain data) to `checkpoint`."""

    def on_train_end(self) -> None:
        """HOST, once after the last epoch (and its final checkpoint)."""

    def on_fit_end(self) -> None:
        """HOST, once after on_train_end."""

    def teardown(self, stage: str) -> None:
        """HOST, with stage "fit", last."""
