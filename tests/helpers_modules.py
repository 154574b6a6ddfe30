"""TrainModules used by the checkpoint, resume and preemption tests (loaded with --module).

They compute exactly what `DigitsClassifier` computes (plus dropout, to exercise the XLA
RNG); the extras only change timing or checkpoint size, so a test can signal a process
mid-epoch or kill it in the middle of a large write.
"""
from __future__ import annotations

import time

import torch
from torch import nn

from trainer.examples.digits import DigitsClassifier


class SlowDigits(DigitsClassifier):
    """Digits with dropout (XLA RNG) and a host-side pause per step (tracing time only)."""

    def __init__(self, step_sleep: float = 0.0, dropout: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.step_sleep = step_sleep
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.drop(x))

    def training_step(self, batch, batch_idx):
        if self.step_sleep:
            time.sleep(self.step_sleep)
        return super().training_step(batch, batch_idx)


class Big(SlowDigits):
    """SlowDigits plus a large persistent buffer: every checkpoint is `megabytes` large."""

    def __init__(self, megabytes: int = 256, **kwargs):
        super().__init__(**kwargs)
        self.register_buffer("ballast", torch.zeros(megabytes * 2**18))  # float32: 4 bytes each
