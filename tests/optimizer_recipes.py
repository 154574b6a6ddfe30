"""The optimizer recipes the engine promises to run without a recompilation (loaded with --module).

`Recipe(optimizer, schedule)`: the digits MLP on 1,408 training images (44 batches of 32,
no ragged batch, no validation) with AdamW (decay and no-decay groups), Adam or SGD with
Nesterov momentum, stepped per optimizer step by a warm-up from exactly 0 and a cosine to
exactly 0 (LambdaLR; at 0 from then on), by OneCycleLR from exactly 0 (it also cycles the
momentum), or by a cosine that restarts from 0 every epoch.
"""
from __future__ import annotations

import math

import torch
from torch.utils.data import DataLoader, Subset

from trainer.examples.digits import DigitsClassifier, digits_datasets

BATCH, SAMPLES = 32, 1408
OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("lambda", "onecycle", "restart")


def build_optimizer(name: str, module: torch.nn.Module, weight_decay: float = 0.1) -> torch.optim.Optimizer:
    if name == "adamw":  # lr * weight_decay = 1e-3 at the peak: AdamW's decay factor equals beta2 there
        weights = [p for n, p in module.named_parameters() if n.endswith("weight")]
        others = [p for n, p in module.named_parameters() if not n.endswith("weight")]
        return torch.optim.AdamW([{"params": weights, "weight_decay": weight_decay},
                                  {"params": others, "weight_decay": 0.0}], lr=1e-2)
    if name == "adam":
        return torch.optim.Adam(module.parameters(), lr=1e-2, betas=(0.9, 0.95))
    if name == "sgd":
        return torch.optim.SGD(module.parameters(), lr=0.5, momentum=0.9, nesterov=True, weight_decay=1e-4)
    raise ValueError(f"optimizer {name!r}: one of {OPTIMIZERS}")


def build_scheduler(name: str, optimizer: torch.optim.Optimizer, decay_steps: int, total_steps: int) -> object:
    """Per-optimizer-step schedulers; `decay_steps`: where the cosine reaches exactly 0."""
    warmup = 5
    if name == "lambda":
        def rate(step: int) -> float:
            if step < warmup:
                return step / warmup
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / (decay_steps - warmup))))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    if name == "onecycle":  # div_factor inf: the first rate is exactly 0 (and the last, never stepped at)
        peak = optimizer.defaults["lr"]
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=peak, total_steps=total_steps + 1,
                                                   div_factor=float("inf"), pct_start=0.1)
    if name == "restart":  # exactly 0 at every multiple of `decay_steps` (an epoch), then a warm-up again
        def cycle(step: int) -> float:
            return 0.5 * (1 - math.cos(2 * math.pi * (step % decay_steps) / decay_steps))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, cycle)
    raise ValueError(f"schedule {name!r}: one of {SCHEDULES}")


def recipe_loader(seed: int = 0) -> DataLoader:
    train, _ = digits_datasets(0)
    return DataLoader(Subset(train, range(SAMPLES)), batch_size=BATCH, shuffle=True,
                      generator=torch.Generator().manual_seed(seed))


class Recipe(DigitsClassifier):
    """`epochs`: how many the run trains (the schedule's length); `accumulate`: batches per optimizer step.
    `optimizer_in_use`: the optimizer `configure_optimizers` built last (to read it back after a fit)."""

    def __init__(self, optimizer: str = "adamw", schedule: str = "lambda", epochs: int = 3, accumulate: int = 2,
                 hidden: int = 64, decay_epochs: int = 2, weight_decay: float = 0.1, **kwargs):
        super().__init__(hidden=hidden, batch_size=BATCH, weight_decay=weight_decay, **kwargs)
        self.optimizer_name, self.schedule_name = optimizer, schedule
        steps_per_epoch = SAMPLES // BATCH // accumulate
        self.decay_steps = steps_per_epoch * (1 if schedule == "restart" else decay_epochs)
        self.total_steps = steps_per_epoch * epochs

    def configure_optimizers(self):
        optimizer = build_optimizer(self.optimizer_name, self, self.weight_decay)
        scheduler = build_scheduler(self.schedule_name, optimizer, self.decay_steps, self.total_steps)
        self.optimizer_in_use = optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def train_dataloader(self) -> DataLoader:
        return recipe_loader(self.shuffle_seed)

    def val_dataloader(self):
        return None


class OldEngineCheckpoint(Recipe):
    """Leaves its checkpoints as the engine up to commit 48b8924 wrote them: that engine rewrote the
    groups (weight_decay 0, applied by itself; capturable Adam; a rate of 0 held as 1e-12 beside a
    private key). The rewrite is applied to the checkpoint as it is written (on_save_checkpoint)."""

    def on_save_checkpoint(self, checkpoint):
        adam = isinstance(self.optimizer_in_use, torch.optim.Adam)
        for group in checkpoint["optimizer"]["param_groups"]:
            if group.get("decoupled_weight_decay") and group.get("weight_decay"):
                group["weight_decay"] = 0.0
            if adam and group.get("capturable") is False and not group.get("fused") and not group.get("foreach"):
                group["capturable"] = True
            group["_tpu_trainer_lr_is_zero"] = group["lr"] == 0.0
            if group["lr"] == 0.0 and group.get("capturable"):
                group["lr"] = 1e-12