"""The XLA training and validation loops: one graph per step, no host reads in between.

The XLA rules, each with its reason:
- One `torch_xla.sync()` per step: it cuts the traced graph there, so every step
  replays the same compiled graph.
- No `.item()`/`.cpu()` in the loop: each would stall the host until the device
  finishes. The loss is read by an asynchronous step closure every `log_every_n_steps`.
- Fixed shapes: batches arrive padded with a mask (`trainer.batches`), and the loss and
  metrics are masked reductions, so the ragged last batch reuses the same graph.
- Device accumulators live for the whole run and are read and zeroed together at the
  end of an epoch by one graph: a fresh `torch.zeros(())` per epoch would be a graph
  constant, i.e. a new graph and a recompile.
"""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable, Mapping

import torch

from trainer import backend


def masked_mean(values: torch.Tensor, mask: torch.Tensor, what: str) -> torch.Tensor:
    """Mean over the real rows; a scalar is returned as is (padded rows already in it)."""
    if values.dim() == 0:
        return values.float()
    if values.dim() != 1 or values.shape[0] != mask.shape[0]:
        raise ValueError(
            f"{what} returned a tensor of shape {tuple(values.shape)}; return a scalar or one "
            f"value per sample (shape [{mask.shape[0]}], e.g. reduction='none')."
        )
    return (values.float() * mask).sum() / mask.sum()


class DeviceAccumulators:
    """Named sums kept on the device across the run; read-and-zeroed in one graph."""

    def __init__(self, device: Any):
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, name: str, value: torch.Tensor) -> None:
        current = self.sums.get(name)
        self.sums[name] = value.detach().float() if current is None else current + value.detach().float()

    def read_and_reset(self) -> dict[str, float]:
        """One host read for all sums (call outside the hot loop, e.g. at epoch end)."""
        if not self.sums:
            return {}
        names = sorted(self.sums)
        snapshot = torch.stack([self.sums[n] for n in names])
        for name in names:
            self.sums[name] = self.sums[name] * 0.0
        backend.sync()
        values = snapshot.cpu().tolist()
        return dict(zip(names, values))


class StepReporter:
    """Receives the loss from the device every few steps, on a background thread."""

    def __init__(self, on_loss: Callable[[int, int, float], None]):
        self.on_loss = on_loss
        self.latest: float | None = None
        self.non_finite_steps: list[int] = []
        self._scheduled = self._reported = 0
        self._done = threading.Condition()

    def schedule(self, loss: torch.Tensor, global_step: int, epoch: int) -> None:
        self._scheduled += 1
        backend.after_step(self._report, (loss, global_step, epoch))

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until every scheduled loss is reported (call after the step's sync, e.g. before a checkpoint)."""
        with self._done:
            if not self._done.wait_for(lambda: self._reported >= self._scheduled, timeout=timeout):
                warnings.warn(f"{self._scheduled - self._reported} logged loss(es) were not reported within "
                              f"{timeout:.0f} s; steps.csv may miss them", stacklevel=2)

    def _report(self, loss: torch.Tensor, global_step: int, epoch: int) -> None:
        try:
            value = loss.item()
            self.latest = value
            if value != value or value in (float("inf"), float("-inf")):
                self.non_finite_steps.append(global_step)
            self.on_loss(global_step, epoch, value)
        finally:
            with self._done:
                self._reported += 1
                self._done.notify_all()


class EpochLoop:
    """Runs the steps of one epoch; owns nothing but the step logic."""

    def __init__(self, module: Any, optimizer: Any, precision: Any, reporter: StepReporter,
                 accumulators: DeviceAccumulators, samples_per_step: int,
                 after_backward: Callable[[], None] = lambda: None, diagnostics: Any = None):
        """`after_backward` runs between backward and the optimizer step (e.g. shard the gradients);
        `diagnostics` (a `trainer.diagnostics.run.RunDiagnostics`) watches each step from outside."""
        self.module, self.optimizer, self.precision = module, optimizer, precision
        self.reporter, self.acc = reporter, accumulators
        self.samples_per_step = samples_per_step
        self.after_backward = after_backward
        self.diagnostics = diagnostics
        self._warned_scalar = False

    def train_epoch(self, loader: Any, progress: Any, bar: Any, after_step: Callable[[], None] | None = None) -> None:
        """Run the epoch's remaining batches, advancing `progress` (a `trainer.progress.Progress`).

        `after_step()` runs at each step boundary, after the sync: the only place a
        checkpoint or a preemption stop may happen.
        """
        self.module.train()
        last_log, last_time = progress.global_step, time.perf_counter()
        for batch, mask in loader:
            if self.diagnostics is not None:
                self.diagnostics.before_step(progress.global_step + 1, batch)
            loss = self._train_step(batch, mask, progress.batch)
            self.acc.add("train_loss_sum", loss)
            progress.step_done()
            if progress.logging_step:
                self.reporter.schedule(loss, progress.global_step, progress.epoch)
            backend.sync()
            if self.diagnostics is not None:  # before any checkpoint: its reads are the engine's, not the step's
                self.diagnostics.after_step(progress.global_step, progress.logging_step)
            bar.update(1)
            if after_step is not None:
                after_step()
            if progress.logging_step:
                now = time.perf_counter()
                rate = (progress.global_step - last_log) * self.samples_per_step / max(now - last_time, 1e-9)
                last_log, last_time = progress.global_step, now
                postfix = {"samples/s": f"{rate:,.0f}"}
                if self.reporter.latest is not None:
                    postfix["loss"] = f"{self.reporter.latest:.4f}"
                bar.set_postfix(postfix, refresh=False)

    def _train_step(self, batch: Any, mask: torch.Tensor, batch_idx: int) -> torch.Tensor:
        with self.precision.autocast():
            out = self.module.training_step(batch, batch_idx)
        self._warn_if_scalar(out, mask)
        loss = masked_mean(out, mask, "training_step")
        loss.backward()
        self.after_backward()
        self.module.on_before_optimizer_step(self.optimizer)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def validate(self, loader: Any) -> None:
        """Sum validation_step's outputs over the real rows (read later by the accumulators)."""
        self.module.eval()
        with torch.no_grad():
            for batch_idx, (batch, mask) in enumerate(loader):
                with self.precision.autocast():
                    out = self.module.validation_step(batch, batch_idx)
                if isinstance(out, torch.Tensor):
                    out = {"loss": out}
                for name, value in _as_mapping(out).items():
                    if value.dim() == 0:
                        self.acc.add(f"val_{name}", value * mask.sum())
                    else:
                        self.acc.add(f"val_{name}", masked_mean(value, mask, "validation_step") * mask.sum())
                self.acc.add("val_rows", mask.sum())
                backend.sync()

    def _warn_if_scalar(self, out: torch.Tensor, mask: torch.Tensor) -> None:
        if out.dim() == 0 and not self._warned_scalar:
            self._warned_scalar = True
            warnings.warn(
                "training_step returned a scalar loss, so the repeated rows that pad a ragged last "
                "batch are counted in it. Return per-sample losses (e.g. reduction='none') for an "
                "exact masked mean, or set trainer.last_batch=drop.",
                stacklevel=3,
            )


def epoch_metrics(sums: Mapping[str, float]) -> dict[str, float]:
    """Turn the accumulators' sums into the epoch's averages."""
    metrics: dict[str, float] = {}
    if sums.get("train_steps"):
        metrics["train_loss"] = sums["train_loss_sum"] / sums["train_steps"]
    rows = sums.get("val_rows", 0.0)
    for name, total in sums.items():
        if name.startswith("val_") and name != "val_rows" and rows:
            metrics[name] = total / rows
    return metrics


def _as_mapping(out: Any) -> Mapping[str, torch.Tensor]:
    if not isinstance(out, Mapping) or not all(isinstance(v, torch.Tensor) for v in out.values()):
        raise TypeError(
            "validation_step must return a tensor (the loss) or a dict of tensors such as "
            f"{{'loss': per_sample_loss, 'accuracy': correct.float()}}; it returned {type(out).__name__}."
        )
    return out
