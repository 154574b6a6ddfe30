"""The workloads `invoke bench` measures: each one as an engine module and a plain loop.

Extension point: add a `Workload` to `WORKLOADS`. Measured today:
- "mlp": the engine's defaults against MpDeviceLoader + one sync per step (1 and 8 devices);
- "fsdp": the engine's FSDP strategy against a hand-written FSDPv2 loop as torch_xla
  documents it (`SpmdFullyShardedDataParallel` over an 8-device `fsdp` mesh, the input
  sharded on `fsdp`), 8 devices.
- "lightning": the same MLP written as a `LightningModule` (tooling/bench/lightning_side.py)
  through our Trainer, beside Lightning's own Trainer on XLA on the same module, 1 device.
A workload gives the engine a `TrainModule` (importable by "module:Class", so the CLI
can run it for the wall-clock comparison) and the plain loop a model, optimizer and data;
`plain_epoch` is the loop itself and must keep to the XLA rules: one sync per step, no
`.item()`, the loss read by an asynchronous step closure every `log_every` steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainer.module import TrainModule

BATCH, STEPS_PER_EPOCH, FEATURES, CLASSES = 64, 40, 784, 10


class SyntheticDigits(Dataset):
    """Fixed random images and labels from a seed: the same bytes in every process."""

    def __init__(self, samples: int = BATCH * STEPS_PER_EPOCH, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, FEATURES, generator=g)
        self.y = torch.randint(0, CLASSES, (samples,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict:
        return {"x": self.x[i], "y": self.y[i]}


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES))


def loader(seed: int = 0) -> DataLoader:
    return DataLoader(SyntheticDigits(seed=seed), batch_size=BATCH, shuffle=True,
                      generator=torch.Generator().manual_seed(seed), drop_last=True)


class BenchMLP(TrainModule):
    """784-512-512-10 on synthetic data, batch 64, AdamW; no validation (the plain loop has none)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net, self.seed = mlp(), seed

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.net(batch["x"]), batch["y"], reduction="none")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return loader(self.seed)


def plain_setup(device: Any, mesh: Any, seed: int = 0) -> tuple:
    """Model, optimizer and torch_xla's MpDeviceLoader (sharded on `data` under SPMD)."""
    import torch_xla.distributed.parallel_loader as pl

    torch.manual_seed(seed)
    model = mlp().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sharding = None
    if mesh is not None:
        import torch_xla.distributed.spmd as xs

        sharding = {"x": xs.ShardingSpec(mesh, ("data", None)), "y": xs.ShardingSpec(mesh, ("data",))}
    return model, optimizer, pl.MpDeviceLoader(loader(seed), device, input_sharding=sharding)


def plain_epoch(model: nn.Module, optimizer: Any, device_loader: Any, log_every: int = 10,
                on_loss: Callable[[float], None] = lambda v: None, on_step: Callable[[int], None] = lambda i: None) -> int:
    """The best-practice loop: one sync per step (MpDeviceLoader's), no host reads."""
    import torch_xla.core.xla_model as xm

    model.train()
    steps = 0
    for steps, batch in enumerate(device_loader, start=1):
        loss = F.cross_entropy(model(batch["x"]), batch["y"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if steps % log_every == 0:
            xm.add_step_closure(lambda t: on_loss(t.item()), args=(loss.detach(),), run_async=True)
        on_step(steps)  # MpDeviceLoader syncs when the next batch is fetched
    return steps


def fsdp_setup(device: Any, mesh: Any, seed: int = 0) -> tuple:
    """The same MLP under torch_xla's FSDPv2, written as its docs show (the `mesh` given is ignored)."""
    import numpy as np
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel

    count = xr.global_runtime_device_count()
    # The docs' (count, 1) ("fsdp", "model") mesh breaks MpDeviceLoader's transfer of the 1-D labels
    # in 2.9 ("too many indices for tensor of dimension 1"); a one-axis fsdp mesh is the same layout.
    fsdp_mesh = xs.Mesh(np.arange(count), (count,), ("fsdp",))
    torch.manual_seed(seed)
    model = SpmdFullyShardedDataParallel(mlp().to(device), mesh=fsdp_mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sharding = {"x": xs.ShardingSpec(fsdp_mesh, ("fsdp", None)), "y": xs.ShardingSpec(fsdp_mesh, ("fsdp",))}
    return model, optimizer, pl.MpDeviceLoader(loader(seed), device, input_sharding=sharding)


@dataclass(frozen=True)
class Workload:
    name: str
    engine_module: str
    """"package.module:Class" for the engine (in process and through the CLI)."""
    plain_setup: Callable[..., tuple]
    plain_epoch: Callable[..., int]
    steps_per_epoch: int
    engine_options: dict = field(default_factory=dict)
    """Trainer keywords for the engine side (the CLI gets them as --flags)."""
    devices: tuple = (1, 8)
    """Device counts the workload is measured on."""
    sides: tuple = ("engine", "plain")
    """What runs in each round; "lightning" adds Lightning's own Trainer on the engine's module."""

    def engine_flags(self) -> list[str]:
        return [arg for key, value in self.engine_options.items() for arg in (f"--{key.replace('_', '-')}", str(value))]


WORKLOADS = {
    "mlp": Workload("mlp", "tooling.bench.workloads:BenchMLP", plain_setup, plain_epoch, STEPS_PER_EPOCH),
    "fsdp": Workload("fsdp", "tooling.bench.workloads:BenchMLP", fsdp_setup, plain_epoch, STEPS_PER_EPOCH,
                     engine_options={"strategy": "fsdp"}, devices=(8,)),
    # The same MLP as a LightningModule: through our Trainer, the hand loop, and Lightning's Trainer on XLA.
    "lightning": Workload("lightning", "tooling.bench.lightning_side:LightningBenchMLP", plain_setup, plain_epoch,
                          STEPS_PER_EPOCH, devices=(1,), sides=("engine", "plain", "lightning")),
}
