"""The XLA training and validation loops: one graph per batch, no host reads in between.

The XLA rules, each with its reason:
- One sync per batch (`backend.sync()`): it cuts the traced graph there, so every batch
  replays one of a few compiled graphs (with gradient accumulation: the batches inside a
  window, and the one that ends it with the optimizer step).
- No `.item()`/`.cpu()` in the loop: each would stall the host until the device
  finishes. Losses, norms and `self.log` values are read by an asynchronous step closure
  every `log_every_n_steps` optimizer steps; epoch sums by one read at the epoch's end.
- Fixed shapes: batches arrive padded with a mask (`trainer.data.batches`), and the loss and
  metrics are masked reductions, so the ragged last batch reuses the same graph.
- Nothing new per step: device accumulators live for the whole run (created as device
  data, so their first use is the same graph as every later one), and the learning rate
  reaches the graph as data, never as a constant (`trainer.fit.schedules`).
"""
from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable, Mapping

import torch

from trainer.runtime import backend
from trainer.errors import UserError


def masked_mean(values: torch.Tensor, mask: torch.Tensor, what: str) -> torch.Tensor:
    """Mean over the real rows; a scalar is returned as is (padded rows already in it)."""
    if values.dim() == 0:
        return values.float()
    if values.dim() != 1 or values.shape[0] != mask.shape[0]:
        raise UserError(
            f"{what} returned a tensor of shape {tuple(values.shape)}; return a scalar or one "
            f"value per sample (shape [{mask.shape[0]}], e.g. reduction='none')."
        )
    return (values.float() * mask).sum() / mask.sum()


class DeviceAccumulators:
    """Named sums kept on the device across the run; a group is read-and-zeroed in one graph.

    Names are "group/name" ("train/loss", "val/rows"); `read_and_reset(group)` reads one group.
    """

    def __init__(self, device: Any):
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, name: str, value: torch.Tensor) -> None:
        current = self.sums.get(name)
        if current is None:  # device data, not a graph constant: the first add is the same graph as the rest
            current = torch.zeros((), dtype=torch.float32).to(self.device)
        self.sums[name] = current + value.detach().float()

    def read_and_reset(self, group: str) -> dict[str, float]:
        """One host read for the group's sums (call outside the hot loop, e.g. at epoch end)."""
        names = sorted(n for n in self.sums if n.startswith(group + "/"))
        if not names:
            return {}
        snapshot = torch.stack([self.sums[n] for n in names])
        for name in names:
            self.sums[name] = self.sums[name] * 0.0
        backend.sync()
        values = snapshot.cpu().tolist()
        return {name[len(group) + 1:]: value for name, value in zip(names, values)}


class StepLogs:
    """What `self.log` recorded during one step (`trainer.module.TrainModule.log` writes here)."""

    _ACCEPTED = {"on_step", "on_epoch", "logger", "sync_dist", "batch_size", "reduce_fx", "rank_zero_only"}

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.prog_bar: set[str] = set()

    def record(self, name: str, value: Any, prog_bar: bool, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - self._ACCEPTED)
        if unknown:
            raise UserError(
                f"self.log({name!r}, ...) got {', '.join(unknown)}, which tpu-trainer does not support. It accepts "
                "prog_bar and Lightning's on_step, on_epoch, logger, sync_dist, batch_size, rank_zero_only and "
                "reduce_fx='mean' (values are logged per step and averaged per epoch; under SPMD they are already "
                "global, so sync_dist changes nothing). Fix: drop those arguments."
            )
        if options.get("reduce_fx", "mean") not in ("mean", torch.mean):
            raise UserError(f"self.log({name!r}, ..., reduce_fx={options['reduce_fx']!r}): only the mean is supported.")
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise UserError(f"self.log({name!r}, ...) got a tensor of shape {tuple(value.shape)}; log one number "
                                "(e.g. .mean()), or return per-sample values from validation_step.")
            value = value.detach().float().reshape(())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)  # a host number stays on the host: no graph constant
        else:
            raise UserError(f"self.log({name!r}, ...) got a {type(value).__name__}; log a number or a one-element tensor.")
        self.values[name] = value
        if prog_bar:
            self.prog_bar.add(name)

    def take(self) -> dict[str, Any]:
        values, self.values = self.values, {}
        return values


class StepReporter:
    """Receives a step's values from the device every few steps, on a background thread."""

    def __init__(self, on_values: Callable[[int, int, dict], None]):
        self.on_values = on_values
        self.latest: dict[str, float] = {}
        self.non_finite_steps: list[int] = []
        self._scheduled = self._reported = 0
        self._done = threading.Condition()

    def schedule(self, device_values: Mapping[str, torch.Tensor], host_values: Mapping[str, float],
                 global_step: int, epoch: int) -> None:
        self._scheduled += 1
        names = list(device_values)
        backend.after_step(self._report, ([device_values[n] for n in names], names, dict(host_values), global_step, epoch))

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until every scheduled step is reported (call after the step's sync, e.g. before a checkpoint)."""
        with self._done:
            if not self._done.wait_for(lambda: self._reported >= self._scheduled, timeout=timeout):
                warnings.warn(f"{self._scheduled - self._reported} logged step(s) were not reported within "
                              f"{timeout:.0f} s; steps.csv may miss them", stacklevel=2)

    def _report(self, tensors: list, names: list, host: dict, global_step: int, epoch: int) -> None:
        try:
            values = {**host, **{n: t.item() for n, t in zip(names, tensors)}}
            self.latest = values
            loss = values.get("loss")
            if loss is not None and (loss != loss or loss in (float("inf"), float("-inf"))):
                self.non_finite_steps.append(global_step)
            self.on_values(global_step, epoch, values)
        finally:
            with self._done:
                self._reported += 1
                self._done.notify_all()


class EpochLoop:
    """Runs the batches of one epoch; owns nothing but the step logic."""

    def __init__(self, module: Any, optimizer: Any, precision: Any, reporter: StepReporter,
                 accumulators: DeviceAccumulators, samples_per_step: int, schedule: Any,
                 gradient_clip_val: float = 0.0, after_backward: Callable[[], None] = lambda: None,
                 diagnostics: Any = None):
        """`schedule`: the run's `trainer.fit.schedules.LrSchedule`; `after_backward` runs between the last
        backward of a window and the optimizer step (e.g. shard the gradients); `diagnostics` (a
        `trainer.diagnostics.run.RunDiagnostics`) watches each batch from outside."""
        self.module, self.optimizer, self.precision = module, optimizer, precision
        self.reporter, self.acc, self.schedule = reporter, accumulators, schedule
        self.samples_per_step = samples_per_step
        self.clip = gradient_clip_val
        self.after_backward = after_backward
        self.diagnostics = diagnostics
        self.logs = StepLogs()
        self.host_logs: dict[str, list[float]] = {}
        """Numbers (not tensors) from self.log in training, per optimizer step, for the epoch mean."""
        self.val_host_logs: dict[str, tuple[float, int]] = {}
        """Numbers from self.log in validation: (sum weighted by real rows, real rows)."""
        self._warned_scalar = False
        module.__dict__["_tpu_trainer_logs"] = self.logs  # where TrainModule.log writes

    def train_epoch(self, loader: Any, progress: Any, bar: Any, rows_of: Callable[[int], int],
                    after_step: Callable[[], None] | None = None) -> None:
        """Run the epoch's remaining batches, advancing `progress` (a `trainer.fit.progress.Progress`).

        `rows_of(i)`: real rows of the epoch's batch i (known on the host), to weigh the batches of
        an accumulation window. `after_step()` runs after each optimizer step's sync: the only place
        a checkpoint, a mid-epoch validation or a stop may happen. Returns early at `progress.done`.
        """
        self.module.train()
        last_log, last_time = progress.global_step, time.perf_counter()
        window: dict[str, Any] = {}
        for item in loader:
            batch, mask = item
            index = progress.batch
            steps = progress.window_ends_at(index)
            fraction = item.rows / sum(rows_of(i) for i in progress.window_of(index))
            weight = self._on_device(fraction)
            if self.diagnostics is not None:
                self.diagnostics.before_step(progress.global_step + 1, batch)
            loss, logged = self._micro_step(batch, mask, index, weight, item.rows < mask.shape[0])
            for name, value in {"loss": loss, **logged}.items():
                if isinstance(value, torch.Tensor):
                    scaled = value if weight is None else value * weight
                    window[name] = scaled if name not in window else window[name] + scaled
                else:
                    window[name] = window.get(name, 0.0) + value * fraction
            if steps:
                norm = self._optimizer_step()
                if norm is not None:
                    window["grad_norm"] = norm
                window.update(self.logs.take())  # what on_before_optimizer_step logged
                self._account(window)
            progress.batch_done(steps)
            reads = 0
            if steps and progress.logging_step:
                device = {k: v for k, v in window.items() if isinstance(v, torch.Tensor)}
                host = {k: v for k, v in window.items() if not isinstance(v, torch.Tensor)}
                self.reporter.schedule(device, {**host, "lr": self.schedule.logged_lr()}, progress.global_step,
                                       progress.epoch)
                reads = len(device)
            if steps:
                window = {}
                self.schedule.after_optimizer_step(progress.global_step)
            backend.sync()
            if self.diagnostics is not None:  # before any checkpoint: its reads are the engine's, not the step's
                step = progress.global_step + (0 if steps else 1)  # the optimizer step this batch belongs to
                self.diagnostics.after_step(step, bool(reads), max(reads, 1))
            bar.update(1)
            if steps and after_step is not None:
                after_step()
            if steps and progress.logging_step:
                now = time.perf_counter()
                rate = (progress.global_step - last_log) * self.samples_per_step / max(now - last_time, 1e-9)
                last_log, last_time = progress.global_step, now
                bar.set_postfix(self._postfix(rate), refresh=False)
            if steps and progress.done:
                return

    def _on_device(self, fraction: float) -> torch.Tensor | None:
        """A batch's share of its window, as device data (a Python float would be a graph constant,
        and a window's last batches have other shares: more graphs). None: the whole window."""
        if fraction == 1.0:
            return None
        return torch.tensor(fraction, dtype=torch.float32).to(self.acc.device)

    def _micro_step(self, batch: Any, mask: torch.Tensor, batch_idx: int, weight: Any, padded: bool) -> tuple:
        with self.precision.autocast():
            out = self.module.training_step(batch, batch_idx)
        logged = self.logs.take()
        values = training_loss(out)
        if padded:
            self._warn_if_scalar(values)
        loss = masked_mean(values, mask, "training_step")
        (loss if weight is None else loss * weight).backward()
        return loss.detach(), logged

    def _optimizer_step(self) -> torch.Tensor | None:
        """The end of a window: shard, clip, hook, step. Returns the gradient norm when clipping."""
        self.after_backward()
        norm = None
        if self.clip:
            params = [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
            norm = torch.nn.utils.clip_grad_norm_(params, self.clip).detach()  # no host read: stays a device value
        self.module.on_before_optimizer_step(self.optimizer)
        self.schedule.optimizer_step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _account(self, window: Mapping[str, Any]) -> None:
        """The optimizer step's values into the epoch's sums (device) or lists (host numbers)."""
        for name, value in window.items():
            if isinstance(value, torch.Tensor):
                self.acc.add(f"train/{name}", value)
            else:
                self.host_logs.setdefault(name, []).append(value)

    def _postfix(self, rate: float) -> dict:
        postfix = {"samples/s": f"{rate:,.0f}"}
        for name in ("loss", *sorted(self.logs.prog_bar)):
            if name in self.reporter.latest:
                postfix[name] = f"{self.reporter.latest[name]:.4f}"
        return postfix

    def validate(self, loader: Any) -> None:
        """Sum validation_step's outputs and self.log values over the real rows (read by `read_validation`)."""
        self.module.eval()
        with torch.no_grad():
            for batch_idx, item in enumerate(loader):
                batch, mask = item
                with self.precision.autocast():
                    out = self.module.validation_step(batch, batch_idx)
                rows = mask.sum()
                for name, value in _validation_outputs(out, self.logs.values).items():
                    if value.dim() == 0:
                        self.acc.add(f"val/{name}", value * rows)
                    else:
                        self.acc.add(f"val/{name}", masked_mean(value, mask, "validation_step") * rows)
                for name, value in self.logs.take().items():
                    if isinstance(value, torch.Tensor):
                        self.acc.add(f"val/log:{name}", value * rows)
                    else:  # a host number stays on the host (as a graph constant it would recompile per value)
                        total, count = self.val_host_logs.get(name, (0.0, 0))
                        self.val_host_logs[name] = (total + value * item.rows, count + item.rows)
                self.acc.add("val/rows", rows)
                backend.sync()

    def read_validation(self) -> dict[str, float]:
        """The validation averages since the last read (one host read)."""
        sums = self.acc.read_and_reset("val")
        host, self.val_host_logs = self.val_host_logs, {}
        rows = sums.pop("rows", 0.0)
        if not rows:
            return {}
        metrics = {}
        for name, total in sums.items():
            metrics[name[4:] if name.startswith("log:") else f"val_{name}"] = total / rows
        metrics.update({name: total / count for name, (total, count) in host.items() if count})
        return metrics

    def read_training(self, optimizer_steps: int) -> dict[str, float]:
        """The epoch's training averages per optimizer step (one host read), then reset."""
        sums = self.acc.read_and_reset("train")
        host, self.host_logs = self.host_logs, {}
        if not optimizer_steps:
            return {}
        metrics = {("train_loss" if name == "loss" else name): total / optimizer_steps for name, total in sums.items()}
        metrics.update({name: sum(values) / len(values) for name, values in host.items() if values})
        return metrics

    def _warn_if_scalar(self, out: torch.Tensor) -> None:
        if out.dim() == 0 and not self._warned_scalar:
            self._warned_scalar = True
            import inspect

            step = type(self.module).training_step
            warnings.warn_explicit(
                "training_step returned a scalar loss, and this batch was padded (a ragged last batch is "
                "filled with repeated rows to keep one XLA graph), so the repeated rows count in it. Return "
                "per-sample losses (e.g. reduction='none') for an exact masked mean, or set "
                "trainer.last_batch=drop.", UserWarning, inspect.getsourcefile(step) or "training_step",
                step.__code__.co_firstlineno)


def training_loss(out: Any) -> torch.Tensor:
    """The loss in what training_step returned: a tensor, or Lightning's {"loss": tensor, ...}."""
    if isinstance(out, Mapping):
        if "loss" not in out or not isinstance(out["loss"], torch.Tensor):
            got = ", ".join(f"{k!r}: {type(v).__name__}" for k, v in out.items()) or "nothing"
            raise UserError(
                f"training_step returned a dict without a tensor under 'loss' ({{{got}}}). Return the loss (a scalar "
                "or per-sample tensor), or {'loss': loss, ...}; log other values with self.log(name, value)."
            )
        out = out["loss"]
    if not isinstance(out, torch.Tensor):
        raise UserError(
            f"training_step returned {type(out).__name__} ({out!r:.80}); the engine needs the loss as a tensor (a "
            "scalar, or one value per sample with reduction='none'), or {'loss': loss, ...}. Skipping a step by "
            "returning None is not supported on XLA (every step runs the same compiled graph)."
        )
    return out


def _validation_outputs(out: Any, logged: Mapping[str, Any]) -> Mapping[str, torch.Tensor]:
    if out is None and logged:
        return {}  # everything went through self.log
    if isinstance(out, torch.Tensor):
        return {"loss": out}
    if isinstance(out, Mapping) and all(isinstance(v, torch.Tensor) for v in out.values()):
        return out
    raise UserError(
        "validation_step must return a tensor (the loss), a dict of tensors such as "
        f"{{'loss': per_sample_loss, 'accuracy': correct.float()}}, or log with self.log; it returned "
        f"{type(out).__name__}."
    )
