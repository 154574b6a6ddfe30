"""One `Trainer.fit` call, start to finish, as a straight line of steps.

    outputs -> seed -> module to device -> optimizer -> data -> epochs -> final checkpoint
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from trainer.batches import FixedShapeBatches
from trainer.checkpoint import save_atomic, to_cpu
from trainer.device_loader import BatchTransfer, DeviceLoader
from trainer.engine import FitResult, seed_everything
from trainer.errors import UserError
from trainer.loop import DeviceAccumulators, EpochLoop, StepReporter, compile_count, epoch_metrics
from trainer.model_setup import move_module, repoint_optimizer
from trainer.outputs import RunOutputs, prepare_run_dir
from trainer.precision import Precision
from trainer.sampling import shard_loader

log = logging.getLogger(__name__)


class FitSession:
    def __init__(self, trainer: Any, module: Any, runtime: Any):
        self.trainer, self.config, self.module, self.runtime = trainer, trainer.config, module, runtime
        self.precision = Precision(self.config.precision)
        self.run_dir: Path | None = None
        self.outputs = RunOutputs.disabled()

    def run(self, train_loader: Any, val_loader: Any) -> FitResult:
        self._open_outputs()
        try:
            return self._fit(train_loader, val_loader)
        finally:
            self.outputs.close()

    def _open_outputs(self) -> None:
        if self.runtime.is_global_zero:
            self.run_dir = prepare_run_dir(self.trainer.default_run_dir())
            self.outputs = RunOutputs(self.run_dir)
            self.outputs.write_config(self.trainer.resolved_config(self.runtime, self.run_dir))
            log.info("run directory: %s", self.run_dir)

    def _fit(self, train_loader: Any, val_loader: Any) -> FitResult:
        cfg, rt = self.config, self.runtime
        log.info(
            "training on %s (%s), precision %s, torch %s, torch_xla %s",
            self.trainer.plan.selection.describe(), rt.device, cfg.precision, rt.torch_version, rt.xla_version,
        )
        seed_everything(cfg.seed, rt.device)
        module = self.precision.convert_module(self.module)
        moved = move_module(module, rt.device)
        optimizer, scheduler = _optimizers(module.configure_optimizers())
        repoint_optimizer(optimizer, moved)
        train_loader = train_loader if train_loader is not None else module.train_dataloader()
        val_loader = val_loader if val_loader is not None else module.val_dataloader()
        train = self._device_loader(train_loader)
        val = self._device_loader(val_loader) if val_loader is not None else None

        accumulators = DeviceAccumulators(rt.device)
        reporter = StepReporter(self.outputs.log_step)
        loop = EpochLoop(module, optimizer, self.precision, reporter, accumulators,
                         cfg.log_every_n_steps, samples_per_step=train.batches.full_size * rt.process_count)
        module.on_fit_start()
        global_step, compiles, metrics = 0, [], {}
        for epoch in range(1, cfg.max_epochs + 1):
            module.on_train_epoch_start(epoch)
            start, compiles_before = time.perf_counter(), compile_count()
            with tqdm(total=len(train), desc=f"epoch {epoch}/{cfg.max_epochs}", unit="step",
                      disable=not (cfg.progress_bar and rt.is_global_zero), leave=False, dynamic_ncols=True) as bar:
                steps_before = global_step
                global_step = loop.train_epoch(train, epoch, global_step, bar)
            if val is not None:
                loop.validate(val)
            sums = accumulators.read_and_reset()  # the epoch's one host read
            sums["train_steps"] = global_step - steps_before
            if scheduler is not None:
                scheduler.step()
            seconds = time.perf_counter() - start
            metrics = epoch_metrics(sums)
            compiles.append(compile_count() - compiles_before)
            row = {"epoch": epoch, "global_step": global_step, **metrics, "compiles": compiles[-1],
                   "epoch_seconds": round(seconds, 3),
                   "samples_per_second": round(sums["train_steps"] * loop.samples_per_step / seconds, 1)}
            self.outputs.log_epoch(row)
            module.on_validation_epoch_end(epoch, {k: v for k, v in metrics.items() if k.startswith("val_")})
            log.info("epoch %d/%d: %s", epoch, cfg.max_epochs, _format(row))
        if reporter.non_finite_steps:
            log.warning("the loss was NaN/inf at logged steps %s", reporter.non_finite_steps[:10])
        module.on_fit_end()
        self._save_final(module, optimizer, scheduler, epoch, global_step)
        result = FitResult(metrics=metrics, history=self.outputs.history, run_dir=self.run_dir,
                           compiles_per_epoch=compiles)
        self._write_summary(result)
        return result

    def _device_loader(self, loader: Any) -> DeviceLoader:
        rt, cfg = self.runtime, self.config
        loader = shard_loader(loader, rt.process_index, rt.process_count, cfg.seed)
        batches = FixedShapeBatches(loader, cfg.last_batch)
        if self.trainer.plan.selection.spmd and batches.full_size and batches.full_size % self.trainer.plan.selection.count:
            raise UserError(
                f"the batch size {batches.full_size} cannot be split evenly over "
                f"{self.trainer.plan.selection.count} devices (SPMD gives each device an equal "
                f"shard). Fix: use a batch size that is a multiple of {self.trainer.plan.selection.count}."
            )
        transfer = BatchTransfer(rt.device, rt.mesh, minibatch=rt.process_count > 1,
                                 cast=self.precision.convert_input)
        return DeviceLoader(batches, transfer, prefetch=cfg.prefetch_batches)

    def _save_final(self, module: Any, optimizer: Any, scheduler: Any, epoch: int, global_step: int) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        torch_xla.sync()
        xm.wait_device_ops()  # the state we save must be the state after the last step
        state = to_cpu({"module": module.state_dict(), "optimizer": optimizer.state_dict()})
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        state.update(epoch=epoch, global_step=global_step, config=self.trainer.job.to_dict())
        if self.run_dir is not None:
            path = self.run_dir / "checkpoints" / "final.ckpt"
            digest = save_atomic(state, path)
            log.info("final checkpoint: %s (sha256 %s)", path, digest[:12])

    def _write_summary(self, result: FitResult) -> None:
        history = result.history
        summary = {
            **{k: v for k, v in result.metrics.items()},
            "epochs": len(history),
            "global_step": history[-1]["global_step"] if history else 0,
            "compiles_per_epoch": result.compiles_per_epoch,
            "compiles_after_first_epoch": sum(result.compiles_per_epoch[1:]),
            "devices": self.trainer.plan.selection.count,
            "device_index": self.trainer.plan.selection.index,
            "precision": self.config.precision,
            "env_profile": self.trainer.plan.profile.name,
            "torch": self.runtime.torch_version,
            "torch_xla": self.runtime.xla_version,
            "mean_samples_per_second_after_first_epoch": _mean([r["samples_per_second"] for r in history[1:]]),
        }
        self.outputs.write_summary(summary)
        self.outputs.plot()


def _optimizers(configured: Any) -> tuple[torch.optim.Optimizer, Any]:
    """Accept an optimizer, (optimizer, scheduler), or Lightning's dict form."""
    if isinstance(configured, torch.optim.Optimizer):
        return configured, None
    if isinstance(configured, dict) and "optimizer" in configured:
        scheduler = configured.get("lr_scheduler")
        if isinstance(scheduler, dict):
            scheduler = scheduler.get("scheduler")
        return configured["optimizer"], scheduler
    if isinstance(configured, (tuple, list)) and len(configured) == 2 and isinstance(configured[0], torch.optim.Optimizer):
        return configured[0], configured[1]
    raise TypeError(
        "configure_optimizers() must return an optimizer, (optimizer, lr_scheduler), or "
        f"{{'optimizer': ..., 'lr_scheduler': ...}}; it returned {type(configured).__name__}."
    )


def _format(row: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items() if k != "epoch")


def _mean(values: list) -> float | None:
    return round(sum(values) / len(values), 1) if values else None
