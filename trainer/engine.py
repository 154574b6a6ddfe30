"""`Trainer`: the engine's front door. Plain PyTorch in, XLA training out.

    trainer = Trainer(devices=8, precision="bf16", max_epochs=10)
    result = trainer.fit(module, train_loader, val_loader)

`Trainer(...)` validates everything and plans the runtime without importing torch_xla;
`fit` starts XLA, moves the module (re-tying weights), builds the optimizer on the
device, shards and pads the data, runs the epochs and writes the run directory.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from trainer.config import JobConfig, TrainerConfig
from trainer.runtime import RuntimePlan, apply_environment, plan_runtime, start_xla

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitResult:
    metrics: Mapping[str, float]
    """The last epoch's averages: train_loss, val_loss, val_accuracy, ..."""
    history: list
    """One dict per epoch, as in metrics.csv."""
    run_dir: Path | None
    compiles_per_epoch: list


class Trainer:
    def __init__(self, devices: Any = 1, precision: str = "fp32", max_epochs: int = 15, *,
                 job: JobConfig | None = None, **options: Any):
        """Keyword options are the fields of `TrainerConfig` (seed, log_every_n_steps, ...).

        Raises UserError for bad values before any XLA work.
        """
        self.config = TrainerConfig(devices=devices, precision=precision, max_epochs=max_epochs, **options)
        self.job = job or JobConfig(trainer=self.config)
        self.plan: RuntimePlan = plan_runtime(self.config.devices, self.config.env_profile)

    @classmethod
    def from_job(cls, job: JobConfig) -> "Trainer":
        fields = {f.name: getattr(job.trainer, f.name) for f in dataclasses.fields(job.trainer)}
        return cls(job=job, **fields)

    def fit(self, module: Any, train_dataloaders: Any = None, val_dataloaders: Any = None) -> FitResult:
        apply_environment(self.plan)
        runtime = start_xla(self.plan)
        from trainer.session import FitSession

        session = FitSession(self, module, runtime)
        return session.run(train_dataloaders, val_dataloaders)

    # Helpers the session uses; kept here because they depend only on config.
    def resolved_config(self, runtime: Any, run_dir: Path | None) -> dict:
        job = dataclasses.replace(self.job, trainer=self.config).to_dict()
        job["trainer"]["run_dir"] = str(run_dir) if run_dir else ""
        job["trainer"]["env_profile"] = self.plan.profile.name
        job["resolved"] = {
            "devices": self.plan.selection.count,
            "device_index": self.plan.selection.index,
            "host_devices": self.plan.host_devices,
            "spmd": self.plan.selection.spmd,
            "process_count": runtime.process_count,
            "environment": dict(self.plan.env),
            "torch": runtime.torch_version,
            "torch_xla": runtime.xla_version,
        }
        return job

    def default_run_dir(self) -> Path:
        if self.config.run_dir:
            return Path(self.config.run_dir)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return Path("runs") / f"{stamp}-{self.job.name}"


def seed_host(seed: int) -> None:
    """Python, NumPy and torch (CPU). Call before the module is built: its initial weights
    come from torch's CPU generator, and an unseeded build makes every run differ."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def seed_everything(seed: int, device: Any) -> None:
    """Python, NumPy, torch (CPU) and the XLA device generator, from one seed."""
    import torch_xla.core.xla_model as xm

    seed_host(seed)
    xm.set_rng_state(seed, device=device)

