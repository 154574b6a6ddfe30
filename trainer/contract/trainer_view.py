"""`self.trainer` inside a module: a read-only view of the fit, with Lightning's names.

What Lightning code commonly reads: max_epochs, max_steps, current_epoch (0-based, as in
Lightning), global_step (optimizer steps done), callback_metrics / logged_metrics /
progress_bar_metrics (0-d host tensors, as in Lightning), is_global_zero, world_size (the
processes, one per host: each reads its own DataLoader), num_devices (every device in the
mesh), estimated_stepping_batches, optimizers, lr_scheduler_configs, and a few more. The
engine keeps the facts in a `FitFacts` and updates it as the fit goes; the view only reads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class SchedulerConfig:
    """Lightning's LRSchedulerConfig, as far as module code reads it."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    name: str | None = None


@dataclass
class FitFacts:
    """What the view reads; the engine writes it (never the module)."""

    config: Any
    """The job's TrainerConfig."""
    module: Any
    datamodule: Any = None
    num_devices: int = 1
    process_index: int = 0
    process_count: int = 1
    device: Any = None
    run_dir: Any = None
    progress: Any = None
    """The fit's `trainer.fit.progress.Progress` once set-up has made it."""
    optimizers: list = field(default_factory=list)
    lr_scheduler_configs: list = field(default_factory=list)
    train_batches: Callable[[], int] | None = None
    """Batches per epoch of the train loader (materialises it when asked early)."""
    val_batches: Callable[[], int] | None = None
    callback_metrics: dict = field(default_factory=dict)
    logged_metrics: dict = field(default_factory=dict)
    progress_bar_metrics: dict = field(default_factory=dict)
    stage: str = "setup"
    """setup, train, validate or done (`training`, `validating` read it)."""

    def record(self, values: dict, prog_bar: set | frozenset = frozenset(), logged: bool = True) -> None:
        """Host numbers the fit just produced (a logged step, a validation, an epoch's end)."""
        self.callback_metrics.update(values)
        if logged:
            self.logged_metrics.update(values)
        self.progress_bar_metrics.update({k: v for k, v in values.items() if k in prog_bar})


def _tensors(values: dict) -> dict:
    return {k: torch.tensor(v) for k, v in values.items()}


class TrainerView:
    """Read-only: assigning to it raises (the fit's state is the engine's)."""

    def __init__(self, facts: FitFacts):
        object.__setattr__(self, "_facts", facts)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"self.trainer.{name} cannot be set: self.trainer is a read-only view of the fit in "
                             "tpu-trainer (its settings are Trainer(...) options).")

    # -- length and position
    max_epochs = property(lambda self: self._facts.config.max_epochs)
    max_steps = property(lambda self: self._facts.config.max_steps)
    accumulate_grad_batches = property(lambda self: self._facts.config.accumulate_grad_batches)
    gradient_clip_val = property(lambda self: self._facts.config.gradient_clip_val or None)
    log_every_n_steps = property(lambda self: self._facts.config.log_every_n_steps)
    val_check_interval = property(lambda self: self._facts.config.val_check_interval)
    check_val_every_n_epoch = property(lambda self: 1)
    precision = property(lambda self: self._facts.config.precision)

    @property
    def current_epoch(self) -> int:
        """Epochs completed (0 in the first epoch), as Lightning counts."""
        progress = self._facts.progress
        return 0 if progress is None else progress.epoch - 1

    @property
    def global_step(self) -> int:
        progress = self._facts.progress
        return 0 if progress is None else progress.global_step

    @property
    def num_training_batches(self) -> int:
        train = self._facts.train_batches
        return train() if train else 0

    @property
    def num_val_batches(self) -> list:
        val = self._facts.val_batches
        return [val()] if val else []

    @property
    def estimated_stepping_batches(self) -> int:
        """Optimizer steps the whole fit will take (Lightning's formula over this engine's loader)."""
        cfg = self._facts.config
        steps = math.ceil(self.num_training_batches / cfg.accumulate_grad_batches) * max(cfg.max_epochs, 1)
        return min(steps, cfg.max_steps) if cfg.max_steps != -1 else steps

    # -- what was logged
    callback_metrics = property(lambda self: _tensors(self._facts.callback_metrics))
    logged_metrics = property(lambda self: _tensors(self._facts.logged_metrics))
    progress_bar_metrics = property(lambda self: dict(self._facts.progress_bar_metrics))

    # -- where it runs
    is_global_zero = property(lambda self: self._facts.process_index == 0)
    global_rank = property(lambda self: self._facts.process_index)
    local_rank = property(lambda self: 0)
    node_rank = property(lambda self: self._facts.process_index)
    world_size = property(lambda self: self._facts.process_count)
    num_nodes = property(lambda self: self._facts.process_count)
    num_devices = property(lambda self: self._facts.num_devices)
    device_ids = property(lambda self: list(range(self._facts.num_devices)))
    root_device = property(lambda self: self._facts.device)
    log_dir = property(lambda self: None if self._facts.run_dir is None else str(self._facts.run_dir))
    default_root_dir = property(lambda self: self._facts.config.runs_root)

    # -- what trains
    optimizers = property(lambda self: list(self._facts.optimizers))
    lr_scheduler_configs = property(lambda self: list(self._facts.lr_scheduler_configs))
    lightning_module = property(lambda self: self._facts.module)
    model = property(lambda self: self._facts.module)
    datamodule = property(lambda self: self._facts.datamodule)
    training = property(lambda self: self._facts.stage == "train")
    validating = property(lambda self: self._facts.stage == "validate")
    sanity_checking = property(lambda self: False)
    testing = property(lambda self: False)
    predicting = property(lambda self: False)
    fast_dev_run = property(lambda self: False)
    should_stop = property(lambda self: False)
    logger = property(lambda self: None)
    loggers = property(lambda self: [])
    callbacks = property(lambda self: [])
    progress_bar_callback = property(lambda self: None)  # LightningModule.print then prints plainly
