"""LightningModules for tests/test_lightning_module.py (importable by the CLI as --module).

Each is Lightning's own `BoringModel` (pytorch_lightning.demos) with only what a test
needs added: a hook recorder, a random split in setup(), a self-signal for a preemption
at an exact batch, extra checkpoint state. Nothing here knows tpu-trainer.
"""
from __future__ import annotations

import os
import signal

import torch
from pytorch_lightning.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader, random_split

RECORDED = ("prepare_data", "setup", "configure_model", "configure_optimizers", "on_fit_start", "train_dataloader",
            "val_dataloader", "on_train_start", "on_train_epoch_start", "on_train_batch_start", "training_step",
            "on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
            "on_train_batch_end", "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start",
            "validation_step", "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end",
            "on_train_epoch_end", "on_train_end", "on_fit_end", "teardown")


class SplitAtRandom(BoringModel):
    """BoringModel whose setup() draws its data and splits it at random from the global RNG (as
    Lightning code commonly does), shuffles without a generator of its own, and trains with SGD at a
    rate where it converges. Logs like most Lightning code: self.log in both steps."""

    def __init__(self, batch_size: int = 4, lr: float = 0.02):
        super().__init__()
        self.batch_size, self.lr = batch_size, lr

    def setup(self, stage):
        data = RandomDataset(32, 96)
        self.train_set, self.val_set = random_split(data, [64, 32])

    def training_step(self, batch, batch_idx):
        loss = self.loss(self(batch))
        self.log("train_mse", loss, prog_bar=True)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        self.log("val_mse", self.loss(self(batch)))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.layer.parameters(), lr=self.lr)
        steps = self.trainer.estimated_stepping_batches  # a common OneCycleLR/cosine argument
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - 0.5 * step / steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def on_fit_end(self):
        self.final_metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items()}

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


def recording(cls: type) -> type:
    """`cls` with every hook of RECORDED appending its name to `self.calls` (host Python only)."""

    def wrap(name: str):
        inner = getattr(cls, name)

        def hook(self, *args, **kwargs):
            self.__dict__.setdefault("calls", []).append(name)
            return inner(self, *args, **kwargs)

        hook.__name__ = name
        return hook

    return type(f"Recorded{cls.__name__}", (cls,), {name: wrap(name) for name in RECORDED})


RecordedSplit = recording(SplitAtRandom)


class SignalsAndCounts(BoringModel):
    """BoringModel (its own data, batch 1) that sends itself a real SIGTERM at one batch of one epoch
    (1-based epoch), and keeps a count of the batches it trained in its checkpoints
    (on_save_checkpoint / on_load_checkpoint)."""

    def __init__(self, signal_epoch: int = 0, signal_batch: int = 0):
        super().__init__()
        self.signal_epoch, self.signal_batch = signal_epoch, signal_batch
        self.batches_seen = 0

    def on_train_batch_start(self, batch, batch_idx):
        self.batches_seen += 1
        if (self.current_epoch + 1, batch_idx) == (self.signal_epoch, self.signal_batch):
            os.kill(os.getpid(), signal.SIGTERM)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["batches_seen"] = self.batches_seen

    def on_load_checkpoint(self, checkpoint):
        self.batches_seen = checkpoint["batches_seen"]
