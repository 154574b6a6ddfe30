"""The epochs of one fit: train, validate, the epoch's row, and the checkpoints in between.

    each epoch   the host RNG and shuffle as at its start (a resumed first epoch: as saved)
                 -> on_train_epoch_start -> train (after each optimizer step: stop? validate?
                 checkpoint?) -> validate -> on_train_epoch_end -> the epoch's row -> the
                 epoch-end checkpoint (on_save_checkpoint)

SIGTERM/SIGINT only set a flag (`trainer.fit.preemption`); it is acted on after an
optimizer step's sync or at the epoch's end: save, then raise `TrainingInterrupted`.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from trainer.checkpoint.state import SkipBatches, capture_host_rng, restore_host_rng, restore_xla_rng
from trainer.data.device_loader import DeviceLoader
from trainer.fit.metrics import read_values
from trainer.fit.preemption import TrainingInterrupted
from trainer.fit.setup import Fit
from trainer.runtime import backend

log = logging.getLogger(__name__)


class EpochRunner:
    def __init__(self, fit: Fit, place: Any, config: Any, runtime: Any, diagnostics: Any, stop: Any,
                 push_outputs: Any):
        """`config`: the job's TrainerConfig; `stop`: the fit's `StopRequest`; `push_outputs()`:
        publishes the outputs of a gs:// run directory at each epoch's end."""
        self.fit, self.place, self.config, self.runtime = fit, place, config, runtime
        self.diagnostics, self.stop, self.push_outputs = diagnostics, stop, push_outputs
        self.compiles: list[int] = []
        self.metrics: dict[str, float] = {}
        self.epoch_rng: dict = {}
        """The host RNG and the loader's generators as at the current epoch's start (a mid-epoch
        checkpoint resumes from there, replaying the epoch's done batches)."""

    def run_epoch(self, epoch: int) -> None:
        fit, cfg, progress, resumed = self.fit, self.config, self.fit.progress, self.place.resumed
        epoch_len = len(fit.train)  # once per epoch, not in the per-step callback
        skip = progress.start_epoch(epoch, epoch_len)
        resuming = resumed is not None and epoch == progress.first_epoch
        if resuming:  # the epoch's shuffle and host RNG as they were when it started
            restore_host_rng(resumed.state["epoch_start_rng"], fit.generators)
        self.epoch_rng = capture_host_rng(fit.generators)
        fit.hooks.call("on_train_epoch_start")
        train = _positioned(fit.train, epoch, skip)
        if resuming:
            restore_xla_rng(resumed.state, self.runtime.device)  # after every set-up sync, right before the first step

        start, compiles_before, steps_before = time.perf_counter(), backend.compile_count(), progress.global_step
        with tqdm(total=epoch_len, initial=skip, desc=f"epoch {epoch}/{cfg.max_epochs}", unit="batch",
                  disable=not (cfg.progress_bar and self.runtime.is_global_zero), leave=False, dynamic_ncols=True) as bar:
            fit.loop.train_epoch(train, progress, bar, fit.train.batches.rows_of, self.after_step)
        completed = progress.batch == epoch_len  # else max_steps was reached mid-epoch
        validation = fit.loop.validate(fit.val) if self._validates(epoch) else {}
        training = fit.loop.p.metrics.read_epoch(progress.global_step - steps_before + skip // progress.accumulate)
        logs, facts = fit.contract.logs, fit.contract.facts
        # self.trainer.callback_metrics as Lightning fills it: epoch values of what was logged per epoch
        # (a value logged per step only keeps its last logged step's value there; metrics.csv has its mean)
        fit.reporter.drain()  # the epoch's last logged step has landed: its values too
        facts.record({k: v for k, v in fit.reporter.latest.items() if k in logs.options}, logs.prog_bar, logged=False)
        facts.record({k: v for k, v in training.items() if logs.has_epoch_value(k)}, logs.prog_bar)
        fit.hooks.call("on_train_epoch_end")
        epoch_logged = read_values(logs.take_epoch_values())
        facts.record(epoch_logged, logs.prog_bar)
        self.metrics = {**training, **validation, **epoch_logged}
        fit.schedule.after_epoch(epoch, self.metrics)
        seconds = time.perf_counter() - start
        self.compiles.append(backend.compile_count() - compiles_before)
        fit.reporter.drain()  # every logging read has landed: the epoch's host-read count is exact
        row = {"epoch": epoch, "global_step": progress.global_step, **self.metrics, "compiles": self.compiles[-1],
               "epoch_seconds": round(seconds, 3),
               "samples_per_second": round((progress.global_step - steps_before) * fit.loop.p.samples_per_step
                                           / seconds, 1),
               **self.diagnostics.epoch_end()}
        self.place.outputs.log_epoch(row)
        log.info("epoch %d/%d: %s", epoch, cfg.max_epochs, format_row(row))
        self.push_outputs()
        last = epoch == cfg.max_epochs or progress.done
        if completed:
            progress.end_epoch()
        reason = fit.checkpointer.reason_at_epoch_end(epoch, last=last, stop_requested=self.stop.requested)
        if reason is not None:
            self.save(reason, final=last)

    def after_step(self) -> None:
        """After an optimizer step's sync: the only place to stop, save or validate mid-epoch."""
        fit, progress = self.fit, self.fit.progress
        if self.stop.requested:
            self.save("preempted")
        if progress.validation_due and self._validates(progress.epoch):
            metrics = fit.loop.validate(fit.val)
            self.place.outputs.log_validation(progress.global_step, progress.epoch, metrics)
            log.info("step %d: %s", progress.global_step, format_row(metrics))
        if fit.checkpointer.due_after_step(progress.global_step, progress.batch, progress.epoch_len) \
                and not progress.done:  # the epoch's end saves the final one
            self.save("every_n_steps")

    def _validates(self, epoch: int) -> bool:
        """This epoch validates: there is a validation set, and check_val_every_n_epoch lets it (Lightning's rule)."""
        return self.fit.val is not None and epoch % self.config.check_val_every_n_epoch == 0

    def save(self, reason: str, final: bool = False) -> Path | None:
        """A checkpoint at the current position; after a stop request, raise TrainingInterrupted."""
        fit, progress = self.fit, self.fit.progress
        fit.reporter.drain()  # steps.csv must hold every step the checkpoint claims
        self.place.outputs.flush_steps()
        # A position at an epoch's start resumes with the RNG as it is now; one inside an epoch
        # with the RNG of that epoch's start, then replays the epoch's done batches.
        rng = self.epoch_rng if progress.batch else capture_host_rng(fit.generators)
        path = fit.checkpointer.save(fit.state, global_step=progress.global_step, position=progress.position,
                                     epoch_start_rng=rng, reason=reason, final=final)
        if self.stop.requested:
            raise TrainingInterrupted(self.stop.signum, path)
        return path


def _positioned(train: DeviceLoader, epoch: int, skip: int) -> DeviceLoader:
    """The epoch's batches from batch `skip` on: sought where the position is a function of the
    step (token shards), else replayed on the host from the epoch's start (any DataLoader)."""
    loader = train.batches.loader
    if hasattr(loader, "seek"):
        loader.set_epoch(epoch)
        loader.seek(skip)
        return train
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):  # samplers that shard across processes reshuffle per epoch, identically
        sampler.set_epoch(epoch)
    return DeviceLoader(SkipBatches(train.batches, skip), train.transfer, train.prefetch) if skip else train


def format_row(row: dict) -> str:
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items() if k != "epoch")
