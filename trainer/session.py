"""One `Trainer.fit` call, start to finish, as a straight line of steps.

    resume? -> outputs -> seed -> module to device -> optimizer -> data -> restore state
    -> epochs (checkpoints at step boundaries; SIGTERM/SIGINT stop there) -> final checkpoint
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from trainer.batches import FixedShapeBatches
from trainer.checkpoint_manifest import CheckpointStore
from trainer.checkpointing import CHECKPOINT_DIR, Checkpointer, find_resume, run_dir_for
from trainer.device_loader import BatchTransfer, DeviceLoader
from trainer.engine import FitResult, seed_everything
from trainer.errors import UserError
from trainer.loop import DeviceAccumulators, EpochLoop, StepReporter, compile_count, epoch_metrics
from trainer.model_setup import move_module, repoint_optimizer
from trainer.outputs import RunOutputs, prepare_run_dir
from trainer.precision import Precision
from trainer.preemption import StopRequest, TrainingInterrupted
from trainer.run_manifest import record_resume, write_run_manifest
from trainer.sampling import shard_loader
from trainer.training_state import (
    SkipBatches, capture_host_rng, loader_generators, restore_host_rng, restore_training_state, restore_xla_rng,
)

log = logging.getLogger(__name__)


class FitSession:
    def __init__(self, trainer: Any, module: Any, runtime: Any):
        self.trainer, self.config, self.module, self.runtime = trainer, trainer.config, module, runtime
        self.precision = Precision(self.config.precision)
        self.run_dir: Path | None = None
        self.outputs = RunOutputs.disabled()
        self.store: CheckpointStore | None = None
        self.resumed = None

    def run(self, train_loader: Any, val_loader: Any) -> FitResult:
        # Handlers first: a SIGTERM during set-up must not kill the process half-way.
        with StopRequest() as self.stop:
            self._open_outputs()
            try:
                return self._fit(train_loader, val_loader)
            finally:
                self.outputs.close()

    def _open_outputs(self) -> None:
        cfg = self.config
        run_dir = run_dir_for(cfg.resume, cfg.run_dir) or self.trainer.default_run_dir()
        self.resumed = find_resume(cfg.resume, run_dir)
        if not self.runtime.is_global_zero:
            return
        job = self.trainer.job.to_dict()
        self.run_dir = prepare_run_dir(run_dir, resuming=bool(cfg.resume))
        self.store = CheckpointStore(self.run_dir / CHECKPOINT_DIR, self.trainer.job.checkpoint.keep_last)
        self.store.start()
        if self.resumed is None:
            self.outputs = RunOutputs(self.run_dir)
            write_run_manifest(self.run_dir, job, self.trainer.plan, self.runtime)
        else:
            state = self.resumed.state
            _warn_config_changes(state.get("config", {}), job)
            self.outputs = RunOutputs(self.run_dir, resume_step=state["global_step"], completed_epochs=state["epoch"])
            record_resume(self.run_dir, job, self.trainer.plan, self.runtime, self.resumed.path,
                          self.resumed.sha256, state["global_step"])
            log.info("resuming from %s: step %d, epoch %d, batch %d", self.resumed.path, state["global_step"],
                     state["position"]["epoch"], state["position"]["batch"])
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
                         cfg.log_every_n_steps, samples_per_step=(train.batches.full_size or 0) * rt.process_count)
        parts = _Parts(module, optimizer, scheduler, accumulators)
        checkpointer = Checkpointer(self.trainer.job.checkpoint, self.store, self.trainer.job.to_dict(),
                                    rt.device, cfg.max_epochs)
        generators = loader_generators(train.batches.loader)
        resumed = self.resumed.state if self.resumed is not None else None
        first_epoch, first_batch, global_step = 1, 0, 0
        if resumed is not None:
            restore_training_state(resumed, module, optimizer, scheduler, accumulators, rt.device)
            first_epoch, first_batch = resumed["position"]["epoch"], resumed["position"]["batch"]
            global_step = resumed["global_step"]
        module.on_fit_start()
        compiles, metrics = [], {}

        def save(position: tuple[int, int], epoch_rng: dict, reason: str) -> Path | None:
            reporter.drain()  # steps.csv must hold every step the checkpoint claims
            self.outputs.flush_steps()
            return checkpointer.save(parts, global_step=global_step, position=position,
                                     epoch_start_rng=epoch_rng, reason=reason)

        stop = self.stop
        if stop.requested:  # signalled during set-up: nothing new to save
            raise TrainingInterrupted(stop.signum, None)
        for epoch in range(first_epoch, cfg.max_epochs + 1):
            resuming = resumed is not None and epoch == first_epoch
            _set_sampler_epoch(train.batches.loader, epoch)
            if resuming:  # the epoch's shuffle and host RNG as they were when it started
                restore_host_rng(resumed["epoch_start_rng"], generators)
            epoch_rng = capture_host_rng(generators)
            module.on_train_epoch_start(epoch)
            skip = first_batch if resuming else 0
            epoch_len = len(train)  # once per epoch, not in the per-step callback
            epoch_train = DeviceLoader(SkipBatches(train.batches, skip), train.transfer, train.prefetch) if skip else train
            if resuming:
                restore_xla_rng(resumed, rt.device)  # after every setup sync, right before the first step

            def after_step(step: int, batches_done: int) -> None:
                nonlocal global_step
                global_step = step
                if stop.requested:
                    raise TrainingInterrupted(stop.signum, save((epoch, batches_done), epoch_rng, "preempted"))
                if checkpointer.due_after_step(step, batches_done, epoch_len):
                    save((epoch, batches_done), epoch_rng, "every_n_steps")

            start, compiles_before = time.perf_counter(), compile_count()
            with tqdm(total=epoch_len, initial=skip, desc=f"epoch {epoch}/{cfg.max_epochs}", unit="step",
                      disable=not (cfg.progress_bar and rt.is_global_zero), leave=False, dynamic_ncols=True) as bar:
                steps_before = global_step
                global_step = loop.train_epoch(epoch_train, epoch, global_step, bar, skip, after_step)
            if val is not None:
                loop.validate(val)
            sums = accumulators.read_and_reset()  # the epoch's one host read
            sums["train_steps"] = global_step - steps_before + skip
            if scheduler is not None:
                scheduler.step()
            seconds = time.perf_counter() - start
            metrics = epoch_metrics(sums)
            compiles.append(compile_count() - compiles_before)
            row = {"epoch": epoch, "global_step": global_step, **metrics, "compiles": compiles[-1],
                   "epoch_seconds": round(seconds, 3),
                   "samples_per_second": round((global_step - steps_before) * loop.samples_per_step / seconds, 1)}
            self.outputs.log_epoch(row)
            module.on_validation_epoch_end(epoch, {k: v for k, v in metrics.items() if k.startswith("val_")})
            log.info("epoch %d/%d: %s", epoch, cfg.max_epochs, _format(row))
            if epoch == cfg.max_epochs:
                module.on_fit_end()  # before the final checkpoint, as documented
            if stop.requested or checkpointer.due_after_epoch(epoch):
                path = save((epoch + 1, 0), capture_host_rng(generators), "preempted" if stop.requested else "epoch")
                if stop.requested:
                    raise TrainingInterrupted(stop.signum, path)
        if reporter.non_finite_steps:
            log.warning("the loss was NaN/inf at logged steps %s", reporter.non_finite_steps[:10])
        if first_epoch > cfg.max_epochs:
            log.info("the checkpoint already completed %d epoch(s); nothing to train (raise --max-epochs to continue)",
                     first_epoch - 1)
            metrics = {k: v for k, v in (self.outputs.history or [{}])[-1].items() if k.endswith(("loss", "accuracy"))}
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


class _Parts:
    """The device state a checkpoint captures."""

    def __init__(self, module: Any, optimizer: Any, scheduler: Any, accumulators: Any):
        self.module, self.optimizer, self.scheduler, self.accumulators = module, optimizer, scheduler, accumulators


def _warn_config_changes(saved: dict, now: dict, allowed: tuple = ("max_epochs", "resume", "run_dir", "progress_bar")) -> None:
    """A resumed run is only exact with the same job; say which keys differ (extending max_epochs is fine)."""
    changed = []
    for section in sorted((set(saved) | set(now)) - {"checkpoint"}):  # when to save changes no loss
        old, new = saved.get(section), now.get(section)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += [f"{section}.{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                        if old.get(k) != new.get(k) and k not in allowed]
        elif old != new:
            changed.append(f"{section}: {old!r} -> {new!r}")
    if changed:
        log.warning("the resumed job differs from the checkpoint's (the losses will not match an "
                    "uninterrupted run): %s", "; ".join(changed))


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


def _set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Samplers that shard across processes (ours, DistributedSampler) reshuffle per epoch, identically everywhere."""
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def _format(row: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items() if k != "epoch")


def _mean(values: list) -> float | None:
    return round(sum(values) / len(values), 1) if values else None
