"""The bench MLP as a Lightning user writes it, for the "lightning" workload.

The same module runs through our Trainer (the engine side) and through Lightning's own
Trainer on XLA (the third side), against the same hand loop. Lightning is a dev
dependency: only this workload imports it.

Lightning's `XLAAccelerator` counts TPU chips (torch_xla asks the GCE metadata server),
so on CPU-emulated XLA it finds none; `CpuXlaAccelerator` reports the one XLA device
there is and changes nothing else of Lightning's single-device XLA path.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.accelerators import XLAAccelerator

from tooling.bench.workloads import loader, mlp


class LightningBenchMLP(pl.LightningModule):
    """784-512-512-10, batch 64, AdamW, the loss logged to the progress bar: typical Lightning code."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net, self.seed = mlp(), seed

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.net(batch["x"]), batch["y"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return loader(self.seed)


class CpuXlaAccelerator(XLAAccelerator):
    """Lightning's XLA accelerator on the one CPU-emulated XLA device (PJRT_DEVICE=CPU)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def parse_devices(devices: Any) -> int:
        return 1

    @staticmethod
    def get_parallel_devices(devices: Any) -> list:
        import torch_xla

        return [torch_xla.device()]


class EpochClock(pl.Callback):
    """Per-epoch seconds (until the device is done, as the other sides measure) and compilations."""

    def __init__(self, compiles: Callable[[], int], wait_device: Callable[[], None]):
        self.compiles, self.wait_device = compiles, wait_device
        self.epoch_seconds: list[float] = []
        self.epoch_compiles: list[int] = []
        self.second_batch_at: float | None = None  # after the first step: time to first step
        self._start, self._compiles_at_start = 0.0, 0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start, self._compiles_at_start = time.perf_counter(), self.compiles()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.second_batch_at is None and trainer.global_step == 1:
            self.second_batch_at = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.wait_device()
        self.epoch_seconds.append(time.perf_counter() - self._start)
        self.epoch_compiles.append(self.compiles() - self._compiles_at_start)


def lightning_fit(epochs: int, log_every: int, clock: EpochClock) -> None:
    """Lightning's own Trainer on XLA with its defaults, but no logger files or checkpoints."""
    trainer = pl.Trainer(accelerator=CpuXlaAccelerator(), devices=1, max_epochs=epochs, log_every_n_steps=log_every,
                         logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[clock])
    trainer.fit(LightningBenchMLP())
