"""What a fit measures: the epoch's sums on the device and one optimizer step's values.

Nothing here reads the device in the hot loop. Training values are weighted by their
batch's share of the accumulation window (so a window's loss is the mean over its real
rows), summed per optimizer step into device accumulators, and read to the host once
per epoch; logging steps hand the step's values to the `StepReporter`, which reads them
asynchronously after the step's graph has run. Host numbers (a `self.log` of a Python
float) stay on the host: as graph constants they would compile a graph per value.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from trainer.fit.reporter import StepReporter
from trainer.fit.step_outputs import masked_mean, validation_outputs
from trainer.runtime import backend


class DeviceAccumulators:
    """Named sums kept on the device across the run, read and zeroed one group at a time.

    Names are "group/name" ("train/loss", "val/rows"). Every sum is device data between
    steps (each step ends in a sync), so `read_and_reset` is a transfer, never a new graph,
    and the zeros that replace the sums are uploaded, not computed.
    """

    def __init__(self, device: Any):
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}

    def _zero(self) -> torch.Tensor:
        # One element, not 0-d: torch_xla folds a 0-d upload of exactly 0.0 into a graph constant,
        # so the first step after a reset would compile a graph of its own.
        return torch.zeros((1,), dtype=torch.float32).to(self.device)

    def add(self, name: str, value: torch.Tensor) -> None:
        current = self.sums.get(name)
        self.sums[name] = (self._zero() if current is None else current) + value.detach().float().reshape(1)

    def read_and_reset(self, group: str) -> dict[str, float]:
        """One host read for the group's sums (after a sync, outside the hot loop, e.g. at epoch end)."""
        names = sorted(n for n in self.sums if n.startswith(group + "/"))
        values = backend.to_host([self.sums[n] for n in names])
        for name in names:
            self.sums[name] = self._zero()
        return {name[len(group) + 1:]: float(value) for name, value in zip(names, values)}


class TrainingMetrics:
    """The current optimizer step's values, the epoch's sums, and the logging steps' reads."""

    def __init__(self, accumulators: DeviceAccumulators, reporter: StepReporter):
        self.acc, self.reporter = accumulators, reporter
        self._device: dict[str, torch.Tensor] = {}
        self._host: dict[str, float] = {}
        self.last_step: dict[str, torch.Tensor] = {}
        self._host_epoch: dict[str, list[float]] = {}
        """Numbers (not tensors) from self.log, per optimizer step, for the epoch mean."""

    def add_micro_step(self, values: Mapping[str, Any], weight: torch.Tensor | None, share: float) -> None:
        """A batch's values, weighted by its share of the window (`weight`: the share as device data,
        None for a whole window)."""
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                scaled = value if weight is None else value * weight
                self._device[name] = scaled if name not in self._device else self._device[name] + scaled
            else:
                self._host[name] = self._host.get(name, 0.0) + value * share

    def end_step(self, extra: Mapping[str, Any], lr: float, global_step: int, epoch: int, logging: bool) -> int:
        """The optimizer step is traced: add its values to the epoch's sums and, on a logging step,
        register their asynchronous read (before the step's sync). Returns the device reads registered."""
        for name, value in extra.items():  # the step's own values (grad_norm, on_before_optimizer_step logs)
            (self._device if isinstance(value, torch.Tensor) else self._host)[name] = value
        device, host, self._device, self._host = self._device, self._host, {}, {}
        # Kept alive through the step's sync, so the values are outputs of every step's graph, not
        # only of logging steps (whose read would otherwise make a second graph to compile).
        self.last_step = device
        for name, value in device.items():
            self.acc.add(f"train/{name}", value)
        for name, value in host.items():
            self._host_epoch.setdefault(name, []).append(value)
        if not logging:
            return 0
        self.reporter.schedule(device, {**host, "lr": lr}, global_step, epoch)
        return len(device)

    def read_epoch(self, optimizer_steps: int) -> dict[str, float]:
        """The epoch's averages per optimizer step (one host read), then reset."""
        sums = self.acc.read_and_reset("train")
        host, self._host_epoch = self._host_epoch, {}
        if not optimizer_steps:
            return {}
        metrics = {("train_loss" if name == "loss" else name): total / optimizer_steps for name, total in sums.items()}
        metrics.update({name: sum(values) / len(values) for name, values in host.items() if values})
        return metrics


class ValidationMetrics:
    """Sums of validation_step's outputs and self.log values over the real rows."""

    def __init__(self, accumulators: DeviceAccumulators):
        self.acc = accumulators
        self._host: dict[str, tuple[float, int]] = {}
        """Numbers from self.log in validation: (sum weighted by real rows, real rows)."""

    def add_batch(self, out: Any, logged: Mapping[str, Any], mask: torch.Tensor, real_rows: int) -> None:
        rows = mask.sum()
        for name, value in validation_outputs(out, logged).items():
            mean = value if value.dim() == 0 else masked_mean(value, mask, "validation_step")
            self.acc.add(f"val/{name}", mean * rows)
        for name, value in logged.items():
            if isinstance(value, torch.Tensor):
                self.acc.add(f"val/log:{name}", value * rows)
            else:  # a host number stays on the host (as a graph constant it would recompile per value)
                total, count = self._host.get(name, (0.0, 0))
                self._host[name] = (total + value * real_rows, count + real_rows)
        self.acc.add("val/rows", rows)

    def read(self) -> dict[str, float]:
        """The averages since the last read (one host read)."""
        sums = self.acc.read_and_reset("val")
        host, self._host = self._host, {}
        rows = sums.pop("rows", 0.0)
        if not rows:
            return {}
        metrics = {(name[4:] if name.startswith("log:") else f"val_{name}"): total / rows for name, total in sums.items()}
        metrics.update({name: total / count for name, (total, count) in host.items() if count})
        return metrics
