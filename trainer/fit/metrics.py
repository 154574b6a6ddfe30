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
from trainer.fit.step_logs import StepLogs
from trainer.fit.step_outputs import masked_mean, validation_outputs
from trainer.runtime import backend


class DeviceAccumulators:
    """Named sums (or maxima, minima) kept on the device across the run, read and reset one group at a time.

    Names are "group/name" ("train/loss", "val/rows"). Every value is device data between
    steps (each step ends in a sync), so `read_and_reset` is a transfer, never a new graph,
    and the starting values that replace them are uploaded, not computed.
    """

    _START = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}

    def __init__(self, device: Any):
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}
        self.ops: dict[str, str] = {}

    def _start(self, op: str = "sum") -> torch.Tensor:
        # One element, not 0-d: torch_xla folds a 0-d upload of exactly 0.0 into a graph constant,
        # so the first step after a reset would compile a graph of its own.
        return torch.full((1,), self._START[op], dtype=torch.float32).to(self.device)

    def add(self, name: str, value: torch.Tensor) -> None:
        current = self.sums.get(name)
        self.sums[name] = (self._start() if current is None else current) + value.detach().float().reshape(1)

    def reduce(self, name: str, value: torch.Tensor, op: str) -> None:
        """Fold `value` into `name` with op "sum", "max" or "min" (fixed per name)."""
        if op == "sum":
            return self.add(name, value)
        self.ops[name] = op  # also after a resume, which restores the values but not how they combine
        current = self.sums.get(name)
        if current is None:
            current = self._start(op)
        combine = torch.maximum if op == "max" else torch.minimum
        self.sums[name] = combine(current, value.detach().float().reshape(1))

    def read_and_reset(self, group: str) -> dict[str, float]:
        """One host read for the group's values (after a sync, outside the hot loop, e.g. at epoch end)."""
        names = sorted(n for n in self.sums if n.startswith(group + "/"))
        backend.wait_device_ops()  # no execution in flight while the sums are copied (SPMD collectives)
        values = backend.to_host([self.sums[n] for n in names])
        for name in names:
            self.sums[name] = self._start(self.ops.get(name, "sum"))
        return {name[len(group) + 1:]: float(value) for name, value in zip(names, values)}


def _combine(values: list[float], how: str, steps: int) -> float:
    """Host numbers logged once per step (or batch), reduced like their device counterparts."""
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    return sum(values) if how == "sum" else sum(values) / steps


class TrainingMetrics:
    """The current optimizer step's values, the epoch's sums, and the logging steps' reads."""

    def __init__(self, accumulators: DeviceAccumulators, reporter: StepReporter, logs: StepLogs | None = None):
        self.acc, self.reporter, self.logs = accumulators, reporter, logs or StepLogs()
        self._device: dict[str, torch.Tensor] = {}
        self._host: dict[str, float] = {}
        self.last_step: dict[str, torch.Tensor] = {}
        self._host_epoch: dict[str, list[float]] = {}
        """Numbers (not tensors) from self.log, per optimizer step, for the epoch value."""

    def add_micro_step(self, values: Mapping[str, Any], weight: torch.Tensor | None, share: float) -> None:
        """A batch's values, weighted by its share of the window (`weight`: the share as device data,
        None for a whole window); a value reduced by max or min keeps the window's extreme instead."""
        reduction = self.logs.reduction
        for name, value in values.items():
            how = reduction(name)
            if isinstance(value, torch.Tensor):
                if how in ("max", "min"):
                    if name in self._device:
                        value = (torch.maximum if how == "max" else torch.minimum)(self._device[name], value)
                    self._device[name] = value
                    continue
                scaled = value if weight is None else value * weight
                self._device[name] = scaled if name not in self._device else self._device[name] + scaled
            elif how in ("max", "min"):
                self._host[name] = (max if how == "max" else min)(self._host.get(name, value), value)
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
        reduction = self.logs.reduction
        for name, value in device.items():
            how = reduction(name)
            self.acc.reduce(f"train/{name}", value, "sum" if how == "mean" else how)
        for name, value in host.items():
            self._host_epoch.setdefault(name, []).append(value)
        if not logging:
            return 0
        names = self.logs.step_names(device)
        reported = {n: device[n] for n in names} if len(names) < len(device) else device
        self.reporter.schedule(reported, {**{n: host[n] for n in self.logs.step_names(host)}, "lr": lr},
                               global_step, epoch)
        return len(reported)

    def read_epoch(self, optimizer_steps: int) -> dict[str, float]:
        """The epoch's values per optimizer step (one host read), then reset."""
        sums = self.acc.read_and_reset("train")
        host, self._host_epoch = self._host_epoch, {}
        computed = self.logs.compute_metrics("train")
        if not optimizer_steps:
            return {}
        reduction = self.logs.reduction
        metrics = {}
        for name, total in sums.items():
            how = reduction(name)
            metrics["train_loss" if name == "loss" else name] = total / optimizer_steps if how == "mean" else total
        metrics.update({name: _combine(values, reduction(name), len(values)) for name, values in host.items()
                        if values})
        metrics.update(zip(computed, (float(v) for v in backend.to_host(list(computed.values())))))
        return metrics


class ValidationMetrics:
    """Sums of validation_step's outputs and self.log values over the real rows."""

    def __init__(self, accumulators: DeviceAccumulators, logs: StepLogs | None = None, prefix: str = "val"):
        """`prefix`: what returned names get ("val": val_loss; "test" for Trainer.test)."""
        self.acc, self.logs, self.prefix = accumulators, logs or StepLogs(), prefix
        self._host: dict[str, tuple[float, int]] = {}
        """Numbers from self.log in validation: (sum weighted by real rows, real rows)."""

    def add_batch(self, out: Any, logged: Mapping[str, Any], mask: torch.Tensor, real_rows: int) -> None:
        rows = mask.sum()
        for name, value in validation_outputs(out, logged).items():
            mean = value if value.dim() == 0 else masked_mean(value, mask, "validation_step")
            self.acc.add(f"{self.prefix}/{name}", mean * rows)
        for name, value in logged.items():
            how = self.logs.reduction(name)
            if isinstance(value, torch.Tensor):
                # mean: weighted by the batch's real rows (Lightning weighs by the batch size)
                self.acc.reduce(f"{self.prefix}/{how}:{name}", value * rows if how == "mean" else value,
                                "sum" if how == "mean" else how)
            else:  # a host number stays on the host (as a graph constant it would recompile per value)
                total, count = self._host.get(name, (None, 0))
                if how == "mean":
                    value, weight = value * real_rows, real_rows
                else:
                    weight = 1
                if total is not None:
                    value = value + total if how in ("mean", "sum") else (max if how == "max" else min)(total, value)
                self._host[name] = (value, count + weight)
        self.acc.add(f"{self.prefix}/rows", rows)

    def read(self) -> dict[str, float]:
        """The epoch values since the last read (one host read)."""
        sums = self.acc.read_and_reset(self.prefix)
        host, self._host = self._host, {}
        computed = self.logs.compute_metrics(self.prefix)
        rows = sums.pop("rows", 0.0)
        if not rows:
            return {}
        metrics = {}
        for key, total in sums.items():
            how, _, name = key.partition(":")
            if how not in ("mean", "sum", "max", "min"):
                metrics[f"{self.prefix}_{key}"] = total / rows
            else:
                metrics[name] = total / rows if how == "mean" else total
        metrics.update({name: total / count if self.logs.reduction(name) == "mean" else total
                        for name, (total, count) in host.items() if count})
        metrics.update(zip(computed, (float(v) for v in backend.to_host(list(computed.values())))))
        return metrics


def read_values(values: Mapping[str, Any]) -> dict[str, float]:
    """Logged values as host numbers: the device ones in one read (outside the hot loop)."""
    device = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    out = {k: float(v) for k, v in values.items() if k not in device}
    out.update(zip(device, (float(v) for v in backend.to_host(list(device.values())))))
    return out
