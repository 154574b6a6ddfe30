"""One fit, start to finish, as three plain phases around one `Progress` counter.

    set-up   run directory -> resume? -> seed -> module to the device, sharded -> optimizer
             -> data -> restore the checkpoint's state
    epochs   train (checkpoints at step boundaries; SIGTERM/SIGINT stop there) -> validate
             -> the epoch's row -> epoch checkpoint
    finish   summary

`FitSession` is built from the job config, the runtime plan and the started XLA
runtime, and reaches into nothing else: `Trainer` only validates and hands over.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from tqdm.auto import tqdm

from trainer.runtime import backend
from trainer.data.batches import FixedShapeBatches
from trainer.checkpoint.policy import CHECKPOINT_DIR, Checkpointer, find_resume, run_dir_for
from trainer.checkpoint.state import (
    SkipBatches, TrainState, capture_host_rng, loader_generators, restore_host_rng, restore_training_state,
    restore_xla_rng,
)
from trainer.checkpoint.store import CheckpointStore
from trainer.config import JobConfig
from trainer.runtime.env_vars import PJRT_DEVICE
from trainer.data.device_loader import BatchTransfer, DeviceLoader
from trainer.errors import UserError
from trainer.fit.loop import DeviceAccumulators, EpochLoop, StepReporter
from trainer.fit.model_setup import move_module, repoint_optimizer
from trainer.outputs.run_outputs import RunOutputs, default_run_dir, prepare_run_dir
from trainer.parallel.sharding import prepare_module, shard_gradients
from trainer.fit.precision import Precision
from trainer.fit.preemption import StopRequest, TrainingInterrupted
from trainer.fit.progress import Progress
from trainer.outputs.run_manifest import record_resume, resolved_config, write_run_manifest
from trainer.fit.schedules import optimizers
from trainer.data.sampling import shard_loader
from trainer.runtime.seeding import seed_device, seed_everything

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitResult:
    metrics: Mapping[str, float]
    """The last epoch's averages: train_loss, val_loss, val_accuracy, ..."""
    history: list
    """One dict per epoch, as in metrics.csv."""
    run_dir: Path | None
    """Where the outputs were written (for a gs:// run: its local staging copy)."""
    compiles_per_epoch: list
    run_url: str | None = None
    """The gs:// run directory the outputs were published to (None for a local run)."""


class FitSession:
    def __init__(self, job: JobConfig, plan: Any, runtime: Any, diagnostics: Any, mirror: Any = None):
        """`diagnostics`: a `trainer.diagnostics.run.RunDiagnostics` (its environment already exported).
        `mirror`: a connected `trainer.storage.mirror.RunMirror` when the run directory is gs://."""
        self.job, self.plan, self.runtime, self.diagnostics = job, plan, runtime, diagnostics
        self.mirror = mirror
        self.config = job.trainer
        self.precision = Precision(self.config.precision)
        self.run_dir: Path | None = None
        self.outputs = RunOutputs.disabled()
        self.store: CheckpointStore | None = None
        self.resumed = None
        self.compiles: list[int] = []
        self.metrics: dict[str, float] = {}

    def run(self, module: Any, train_loader: Any = None, val_loader: Any = None) -> FitResult:
        # Handlers first: a SIGTERM during set-up must not kill the process half-way.
        with StopRequest() as self.stop:
            self._open_outputs()
            finished = False
            try:
                self._set_up(module, train_loader, val_loader)
                if self.stop.requested:  # signalled during set-up: nothing new to save
                    raise TrainingInterrupted(self.stop.signum, None)
                for epoch in self.progress.epochs():
                    self._run_epoch(epoch)
                    if self.progress.done:
                        break
                result = self._finish()
                finished = True
                return result
            finally:
                if not finished:  # an open profile window is still written; the summary is not
                    self.diagnostics.finish(self.run_dir)
                self.outputs.close()  # everything on disk: now the last push
                self._push_outputs(raising=finished, flush=False)
                if self.mirror is not None:
                    self.mirror.release_worker_log()

    @property
    def run_url(self) -> str | None:
        return self.mirror.remote.url if self.mirror is not None else None

    def _push_outputs(self, raising: bool = False, flush: bool = True) -> None:
        """Publish changed output files to a gs:// run directory (process 0; the others: their log).

        Only the last push after a finished fit raises: an epoch's push that fails (after
        gcsfs's retries) is retried by the next one, and while another error propagates
        this one is only logged. Checkpoints are published separately, and always raise."""
        if self.mirror is None:
            return
        if flush:
            self.outputs.flush()
        try:
            self.mirror.push_outputs(everything=self.outputs.enabled)
        except Exception as exc:  # noqa: BLE001 - reported either way, with where the files are
            if raising:
                raise
            log.warning("could not publish the outputs to %s (%r); they are in %s and the next push retries",
                        self.run_url, exc, self.run_dir)

    # ------------------------------------------------------------------ set-up
    def _open_outputs(self) -> None:
        cfg, job = self.config, self.job.to_dict()
        configured = cfg.run_dir
        if self.mirror is not None:  # the engine writes the staging copy; the mirror publishes it
            configured = str(self.mirror.prepare(resuming=bool(cfg.resume), owner=self.runtime.is_global_zero))
            self.mirror.capture_worker_log(self.runtime.process_index)
        run_dir = run_dir_for(cfg.resume, configured) or default_run_dir(configured, self.job.name, cfg.runs_root)
        self.resumed = find_resume(cfg.resume, run_dir)
        if not self.runtime.is_global_zero:
            return
        # A gs:// run's staging copy was emptied or refilled by `prepare`, which refused a bucket
        # path holding another run; the local check would only see the worker log just opened.
        self.run_dir = prepare_run_dir(run_dir, resuming=bool(cfg.resume) or self.mirror is not None)
        self.store = CheckpointStore(self.run_dir / CHECKPOINT_DIR, self.job.checkpoint.keep_last)
        self.store.start()
        if self.resumed is None:
            self.outputs = RunOutputs(self.run_dir)
            write_run_manifest(self.run_dir, job, self.plan, self.runtime)
        else:
            state = self.resumed.state
            _warn_config_changes(state.get("config", {}), job)
            self.outputs = RunOutputs(self.run_dir, resume_step=state["global_step"], completed_epochs=state["epoch"])
            record_resume(self.run_dir, job, self.plan, self.runtime, self.resumed.path,
                          self.resumed.sha256, state["global_step"])
            log.info("resuming from %s: step %d, epoch %d, batch %d", self.resumed.path, state["global_step"],
                     state["position"]["epoch"], state["position"]["batch"])
        self.outputs.write_config(resolved_config(self.job, self.plan, self.runtime, self.run_dir, self.run_url))
        log.info("run directory: %s", self.run_url or self.run_dir)

    def _set_up(self, module: Any, train_loader: Any, val_loader: Any) -> None:
        cfg, rt, parallel = self.config, self.runtime, self.job.parallel
        log.info("training on %s (%s), %s, precision %s, torch %s, torch_xla %s",
                 self.plan.selection.describe(self.plan.parallel.fully_sharded), rt.device,
                 self.plan.parallel.describe(), cfg.precision, rt.torch_version, rt.xla_version)
        self.diagnostics.start(pjrt_device=self.plan.env.get(PJRT_DEVICE, ""), xla_version=rt.xla_version,
                               run_dir=self.run_dir)  # before any tensor work
        seed_everything(cfg.seed)
        seed_device(cfg.seed, rt.device)
        module = self.precision.convert_module(module)
        moved = move_module(module, rt.device)
        prepare_module(module, self.plan.parallel, rt.mesh, parallel.fsdp_wrap, parallel.activation_checkpointing)
        schedule = optimizers(module.configure_optimizers())
        optimizer, scheduler = schedule.optimizer, schedule.scheduler
        repoint_optimizer(optimizer, moved)
        train_loader = train_loader if train_loader is not None else module.train_dataloader()
        val_loader = val_loader if val_loader is not None else module.val_dataloader()
        self.train = self._device_loader(train_loader)
        self.val = self._device_loader(val_loader) if val_loader is not None else None

        accumulators = DeviceAccumulators(rt.device)
        self.state = TrainState(module, optimizer, scheduler, accumulators)
        self.reporter = StepReporter(self.outputs.log_step)
        fully_sharded = self.plan.parallel.fully_sharded
        samples = (self.train.batches.full_size or 0) * rt.process_count * cfg.accumulate_grad_batches
        self.loop = EpochLoop(module, optimizer, self.precision, self.reporter, accumulators, samples, schedule,
                              gradient_clip_val=cfg.gradient_clip_val,
                              after_backward=(lambda: shard_gradients(module)) if fully_sharded else (lambda: None),
                              diagnostics=self.diagnostics)
        self.schedule = schedule
        self.checkpointer = Checkpointer(self.job.checkpoint, self.store, self.job.to_dict(), rt, sharded=fully_sharded,
                                         on_commit=self.mirror.publish_checkpoints if self.mirror else None)
        self.generators = loader_generators(self.train.batches.loader)
        self.progress = Progress(cfg.max_epochs, cfg.log_every_n_steps, cfg.accumulate_grad_batches, cfg.max_steps,
                                 _validation_every(cfg.val_check_interval, len(self.train), cfg.accumulate_grad_batches)
                                 if self.val is not None else 0)
        if self.resumed is not None:
            saved = self.resumed.state
            restore_training_state(self.resumed, self.state, rt, sharded=fully_sharded)
            schedule.after_restore()  # an older engine's checkpoint: its groups back to the user's settings
            self.progress = self.progress.resumed(saved["position"]["epoch"], saved["position"]["batch"],
                                                  saved["global_step"])
        module.on_fit_start()

    def _device_loader(self, loader: Any) -> DeviceLoader:
        rt, cfg, selection = self.runtime, self.config, self.plan.selection
        loader = shard_loader(loader, rt.process_index, rt.process_count, cfg.seed)
        batches = FixedShapeBatches(loader, cfg.last_batch)
        if selection.spmd and batches.full_size and batches.full_size % selection.count:
            raise UserError(
                f"the batch size {batches.full_size} cannot be split evenly over {selection.count} devices (SPMD "
                f"gives each device an equal shard). Fix: use a batch size that is a multiple of {selection.count}."
            )
        transfer = BatchTransfer(rt.device, rt.mesh, minibatch=rt.process_count > 1, cast=self.precision.convert_input)
        return DeviceLoader(batches, transfer, prefetch=cfg.prefetch_batches)

    # ------------------------------------------------------------------ epochs
    def _run_epoch(self, epoch: int) -> None:
        cfg, progress, state = self.config, self.progress, self.state
        epoch_len = len(self.train)  # once per epoch, not in the per-step callback
        skip = progress.start_epoch(epoch, epoch_len)
        resuming = self.resumed is not None and epoch == progress.first_epoch
        _set_sampler_epoch(self.train.batches.loader, epoch)
        if resuming:  # the epoch's shuffle and host RNG as they were when it started
            restore_host_rng(self.resumed.state["epoch_start_rng"], self.generators)
        self.epoch_rng = capture_host_rng(self.generators)
        state.module.on_train_epoch_start(epoch)
        train = DeviceLoader(SkipBatches(self.train.batches, skip), self.train.transfer, self.train.prefetch) \
            if skip else self.train
        if resuming:
            restore_xla_rng(self.resumed.state, self.runtime.device)  # after every set-up sync, right before the first step

        start, compiles_before, steps_before = time.perf_counter(), backend.compile_count(), progress.global_step
        with tqdm(total=epoch_len, initial=skip, desc=f"epoch {epoch}/{cfg.max_epochs}", unit="batch",
                  disable=not (cfg.progress_bar and self.runtime.is_global_zero), leave=False, dynamic_ncols=True) as bar:
            self.loop.train_epoch(train, progress, bar, self.train.batches.rows_of, self._after_step)
        stopped_early = progress.batch < epoch_len  # max_steps reached mid-epoch
        validation = self._validate() if self.val is not None else {}
        training = self.loop.read_training(progress.global_step - steps_before + skip // progress.accumulate)
        self.metrics = {**training, **validation}
        self.schedule.after_epoch(epoch, self.metrics)
        seconds = time.perf_counter() - start
        self.compiles.append(backend.compile_count() - compiles_before)
        self.reporter.drain()  # every logging read has landed: the epoch's host-read count is exact
        row = {"epoch": epoch, "global_step": progress.global_step, **self.metrics, "compiles": self.compiles[-1],
               "epoch_seconds": round(seconds, 3),
               "samples_per_second": round((progress.global_step - steps_before) * self.loop.samples_per_step / seconds, 1),
               **self.diagnostics.epoch_end()}
        self.outputs.log_epoch(row)
        state.module.on_validation_epoch_end(epoch, validation)
        log.info("epoch %d/%d: %s", epoch, cfg.max_epochs, _format(row))
        self._push_outputs()
        last = epoch == cfg.max_epochs or progress.done
        if not stopped_early:
            progress.end_epoch()
        if last:
            state.module.on_fit_end()  # before the final checkpoint, as documented
        if self.stop.requested or last or self.checkpointer.due_after_epoch(epoch):
            path = self._save(capture_host_rng(self.generators) if not stopped_early else self.epoch_rng,
                              "preempted" if self.stop.requested else ("final" if last else "epoch"), final=last)
            if self.stop.requested:
                raise TrainingInterrupted(self.stop.signum, path)

    def _validate(self) -> dict[str, float]:
        self.loop.validate(self.val)
        return self.loop.read_validation()  # one host read

    def _after_step(self) -> None:
        """After an optimizer step's sync: the only place to stop, save or validate mid-epoch."""
        progress = self.progress
        if self.stop.requested:
            raise TrainingInterrupted(self.stop.signum, self._save(self.epoch_rng, "preempted"))
        if progress.validation_due:
            metrics = self._validate()
            self.outputs.log_validation(progress.global_step, progress.epoch, metrics)
            log.info("step %d: %s", progress.global_step, _format(metrics))
            self.state.module.train()
        if self.checkpointer.due_after_step(progress.global_step, progress.batch, progress.epoch_len) \
                and not progress.done:  # the epoch's end saves the final one
            self._save(self.epoch_rng, "every_n_steps")

    def _save(self, epoch_rng: dict, reason: str, final: bool = False) -> Path | None:
        self.reporter.drain()  # steps.csv must hold every step the checkpoint claims
        self.outputs.flush_steps()
        return self.checkpointer.save(self.state, global_step=self.progress.global_step,
                                      position=self.progress.position, epoch_start_rng=epoch_rng, reason=reason,
                                      final=final)

    # ------------------------------------------------------------------ finish
    def _finish(self) -> FitResult:
        if self.reporter.non_finite_steps:
            log.warning("the loss was NaN/inf at logged steps %s", self.reporter.non_finite_steps[:10])
        metrics = self.metrics
        if not self.compiles:  # a checkpoint already finished the run
            log.info("the checkpoint already completed %d epoch(s) and %d step(s); nothing to train (raise "
                     "--max-epochs or --max-steps to continue)", self.progress.first_epoch - 1, self.progress.global_step)
            metrics = {k: v for k, v in (self.outputs.history or [{}])[-1].items() if k.endswith(("loss", "accuracy"))}
        result = FitResult(metrics=metrics, history=self.outputs.history, run_dir=self.run_dir,
                           compiles_per_epoch=self.compiles, run_url=self.run_url)
        self._write_summary(result)
        return result

    def _write_summary(self, result: FitResult) -> None:
        history = result.history
        summary = {
            **dict(result.metrics),
            "epochs": len(history),
            "global_step": history[-1]["global_step"] if history else 0,
            "compiles_per_epoch": result.compiles_per_epoch,
            "compiles_after_first_epoch": sum(result.compiles_per_epoch[1:]),
            "devices": self.plan.selection.count,
            "device_index": self.plan.selection.index,
            "strategy": self.job.parallel.strategy,
            "mesh": self.plan.parallel.mesh.describe() if self.plan.parallel.mesh else None,
            "precision": self.config.precision,
            "env_profile": self.plan.profile.name,
            "torch": self.runtime.torch_version,
            "torch_xla": self.runtime.xla_version,
            "mean_samples_per_second_after_first_epoch": _mean([r["samples_per_second"] for r in history[1:]]),
            **self.diagnostics.finish(self.run_dir),
        }
        self.outputs.write_summary(summary)
        self.outputs.plot()


def _warn_config_changes(saved: dict, now: dict, allowed: tuple = ("max_epochs", "resume", "run_dir", "progress_bar")) -> None:
    """A resumed run is only exact with the same job; say which keys differ (extending max_epochs is fine)."""
    changed = []
    for section in sorted((set(saved) | set(now)) - {"checkpoint", "diagnostics"}):  # neither changes a loss
        old, new = saved.get(section), now.get(section)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += [f"{section}.{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                        if old.get(k) != new.get(k) and k not in allowed]
        elif old != new:
            changed.append(f"{section}: {old!r} -> {new!r}")
    if changed:
        log.warning("the resumed job differs from the checkpoint's (the losses will not match an "
                    "uninterrupted run): %s", "; ".join(changed))


def _validation_every(interval: Any, epoch_batches: int, accumulate: int) -> int:
    """val_check_interval as optimizer steps between mid-epoch validations (0: epoch end only)."""
    if isinstance(interval, float):
        steps = -(-epoch_batches // accumulate)
        return 0 if interval >= 1.0 else max(1, round(interval * steps))
    return interval


def _set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Samplers that shard across processes (ours, DistributedSampler) reshuffle per epoch, identically everywhere."""
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def _format(row: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items() if k != "epoch")


def _mean(values: list) -> float | None:
    return round(sum(values) / len(values), 1) if values else None
