"""The XLA training and validation loops: one graph per batch, no host reads in between.

The XLA rules, each with its reason:
- One sync per batch (`backend.sync()`): it cuts the traced graph there, so every batch
  replays one of a few compiled graphs (with gradient accumulation: the batches inside a
  window, and the one that ends it with the optimizer step).
- No `.item()`/`.cpu()` in the loop: each would stall the host until the device
  finishes. Losses, norms and `self.log` values are read by an asynchronous step closure
  every `log_every_n_steps` optimizer steps (`trainer.fit.reporter`), epoch sums by one
  read at the epoch's end (`trainer.fit.metrics`).
- Fixed shapes: batches arrive padded with a mask (`trainer.data.batches`), and the loss and
  metrics are masked reductions, so the ragged last batch reuses the same graph.
- Nothing new per step: device accumulators live for the whole run, and the learning
  rate reaches the graph as data, never as a constant (`trainer.fit.schedules`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from trainer.errors import UserError
from trainer.fit.metrics import TrainingMetrics, ValidationMetrics, read_values
from trainer.fit.step_logs import StepLogs
from trainer.fit.step_outputs import ScalarLossWarning, masked_mean, training_loss
from trainer.runtime import backend


@dataclass
class StepParts:
    """What one optimizer step is made of, built once per fit by the session."""

    module: Any
    optimizer: Any
    schedule: Any
    """The run's `trainer.fit.schedules.LrSchedule`."""
    precision: Any
    logs: StepLogs
    metrics: TrainingMetrics
    validation: ValidationMetrics
    diagnostics: Any
    """`trainer.diagnostics.run.RunDiagnostics`: watches each batch from outside."""
    gradient_clip_val: float = 0.0
    after_backward: Callable[[], None] = lambda: None
    """Runs between the last backward of a window and the optimizer step (e.g. shard the gradients)."""
    samples_per_step: int = 0
    hooks: Any = None
    """The module's overridden hooks (`trainer.contract.hooks.Hooks`): each is None or a bound method."""
    facts: Any = None
    """What `self.trainer` reads (`trainer.contract.trainer_view.FitFacts`); the loop sets its stage."""


class EpochLoop:
    """Runs the batches of one epoch and the validation set; owns nothing but the step logic."""

    def __init__(self, parts: StepParts):
        self.p = parts
        self._scalar_loss = ScalarLossWarning(parts.module)

    def train_epoch(self, loader: Any, progress: Any, bar: Any, rows_of: Callable[[int], int],
                    after_step: Callable[[], None]) -> None:
        """Run the epoch's remaining batches, advancing `progress` (a `trainer.fit.progress.Progress`).

        `rows_of(i)`: real rows of the epoch's batch i (known on the host), to weigh the batches of
        an accumulation window. `after_step()` runs after each optimizer step's sync: the only place
        a checkpoint, a mid-epoch validation or a stop may happen. Returns early at `progress.done`.
        """
        p, hooks, speed = self.p, self.p.hooks, _Throughput(progress.global_step, self.p.samples_per_step)
        p.module.train()
        p.facts.stage = "train"
        hooks.enter("training_step")
        for item in loader:
            batch_idx = progress.batch
            window = progress.window_of(batch_idx)
            p.diagnostics.before_step(progress.global_step + 1, item[0])
            if hooks.on_train_batch_start is not None and hooks.call("on_train_batch_start", item[0], batch_idx) == -1:
                raise UserError("on_train_batch_start returned -1 to skip the rest of the epoch, which tpu-trainer "
                                "does not support (every epoch runs its batches). Fix: use max_steps, or a shorter "
                                "DataLoader.")
            out = self._micro_step(item, batch_idx, share=item.rows / sum(rows_of(i) for i in window),
                                   first=batch_idx == window.start)
            if batch_idx + 1 < window.stop:  # the window goes on: this batch's graph, no optimizer step
                progress.batch_done(optimizer_stepped=False)
                self._batch_end(out, item[0], batch_idx)
                self._sync(progress.global_step + 1, reads=0, bar=bar)
                continue
            extra = self._optimizer_step()
            progress.batch_done(optimizer_stepped=True)
            self._batch_end(out, item[0], batch_idx)
            extra.update(p.logs.take())  # what on_before_optimizer_step and on_train_batch_end logged
            reads = p.metrics.end_step(extra, p.schedule.logged_lr(), progress.global_step, progress.epoch,
                                       logging=progress.logging_step)  # read registered before the sync
            p.schedule.after_optimizer_step(progress.global_step)
            self._sync(progress.global_step, reads=reads, bar=bar)
            after_step()
            if progress.logging_step:
                latest = p.metrics.reporter.latest
                p.facts.record({k: v for k, v in latest.items() if k in p.logs.options}, p.logs.prog_bar)
                bar.set_postfix(speed.postfix(progress.global_step, latest, p.logs.prog_bar), refresh=False)
            if progress.done:
                return

    def _micro_step(self, item: Any, batch_idx: int, share: float, first: bool) -> Any:
        """Forward and backward of one batch, its loss weighted by its share of the window."""
        p, hooks = self.p, self.p.hooks
        batch, mask = item
        with p.precision.autocast():
            out = p.module.training_step(batch, batch_idx)
        values = training_loss(out)
        if item.rows < mask.shape[0]:
            self._scalar_loss.check(values)
        loss = masked_mean(values, mask, "training_step")
        if first and hooks.on_before_zero_grad is not None:  # where Lightning zeroes; ours were freed after the step
            hooks.call("on_before_zero_grad", p.optimizer)
        if hooks.on_before_backward is not None:
            hooks.call("on_before_backward", loss)
        # The share as device data: a Python float would be a graph constant, and a window's
        # last batches have other shares (more graphs). None: the batch is the whole window.
        weight = None if share == 1.0 else torch.tensor(share, dtype=torch.float32).to(p.metrics.acc.device)
        (loss if weight is None else loss * weight).backward()
        if hooks.on_after_backward is not None:
            hooks.call("on_after_backward")
        p.metrics.add_micro_step({"loss": loss.detach(), **p.logs.take()}, weight, share)
        return out

    def _batch_end(self, out: Any, batch: Any, batch_idx: int) -> None:
        """on_train_batch_end with Lightning's outputs: the step's dict (or {"loss": ...}), loss detached."""
        if self.p.hooks.on_train_batch_end is None:
            return
        outputs = dict(out) if isinstance(out, dict) else {"loss": out}
        outputs["loss"] = outputs["loss"].detach()
        self.p.hooks.call("on_train_batch_end", outputs, batch, batch_idx)

    def _optimizer_step(self) -> dict[str, Any]:
        """The end of a window: shard, clip, hook, step. Returns the step's own values (grad_norm, logs)."""
        p = self.p
        p.after_backward()
        extra: dict[str, Any] = {}
        if p.gradient_clip_val:
            params = [q for group in p.optimizer.param_groups for q in group["params"] if q.grad is not None]
            extra["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, p.gradient_clip_val).detach()
        if p.hooks.on_before_optimizer_step is not None:  # after clipping: it sees what the optimizer will use
            p.hooks.call("on_before_optimizer_step", p.optimizer)
        p.schedule.optimizer_step()
        p.optimizer.zero_grad(set_to_none=True)
        return extra

    def _sync(self, step: int, reads: int, bar: Any) -> None:
        """Run the step's graph; the diagnostics look before any checkpoint (its reads are the engine's)."""
        backend.sync()
        self.p.diagnostics.after_step(step, bool(reads), max(reads, 1))
        bar.update(1)

    def validate(self, loader: Any) -> dict[str, float]:
        """The averages of validation_step's outputs and self.log values over the real rows (one host read),
        with the validation hooks around them; what the epoch hooks logged joins the result."""
        p, hooks = self.p, self.p.hooks
        p.module.eval()
        p.facts.stage = "validate"
        hooks.call("on_validation_start")
        hooks.call("on_validation_epoch_start")
        hooks.enter("validation_step")
        with torch.no_grad():
            for batch_idx, item in enumerate(loader):
                batch, mask = item
                if hooks.on_validation_batch_start is not None:
                    hooks.call("on_validation_batch_start", batch, batch_idx)
                with p.precision.autocast():
                    out = p.module.validation_step(batch, batch_idx)
                if hooks.on_validation_batch_end is not None:
                    hooks.call("on_validation_batch_end", out, batch, batch_idx)
                p.validation.add_batch(out, p.logs.take(), mask, item.rows)
                backend.sync()
        metrics = p.validation.read()
        p.facts.record(metrics)
        with torch.no_grad():
            hooks.call("on_validation_epoch_end")
            hooks.call("on_validation_end")
        logged = read_values(p.logs.take_epoch_values())
        p.facts.record(logged, p.logs.prog_bar)
        hooks.enter("training_step")
        p.module.train()
        p.facts.stage = "train"
        return {**metrics, **logged}


class _Throughput:
    """Samples per second between logging steps, for the progress bar (host clock only)."""

    def __init__(self, global_step: int, samples_per_step: int):
        self.step, self.time, self.samples_per_step = global_step, time.perf_counter(), samples_per_step

    def postfix(self, global_step: int, latest: dict, prog_bar: set) -> dict:
        now = time.perf_counter()
        rate = (global_step - self.step) * self.samples_per_step / max(now - self.time, 1e-9)
        self.step, self.time = global_step, now
        shown = {"samples/s": f"{rate:,.0f}"}
        shown.update({name: f"{latest[name]:.4f}" for name in ("loss", *sorted(prog_bar)) if name in latest})
        return shown
