"""One fit, start to finish: open the run directory, build the parts, run the epochs, finish.

    open     run directory (local, resumed, gs://)          trainer.fit.run_directory
    build    seed, set-up hooks, module on the device,      trainer.fit.setup
             optimizer, on_fit_start, data
    epochs   on_train_start, train, validate, checkpoints,  trainer.fit.epochs
             on_train_end, on_fit_end, teardown("fit")
    finish   summary.json, the plot, the last publish

`FitSession` is built from the job config, the runtime plan and the started XLA
runtime, and reaches into nothing else: `Trainer` only validates and hands over.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from trainer.contract.hparams import hyper_parameters
from trainer.fit.epochs import EpochRunner
from trainer.fit.preemption import StopRequest, TrainingInterrupted
from trainer.fit.run_directory import RunPlace, open_run
from trainer.fit.setup import build_fit
from trainer.runtime.env_vars import PJRT_DEVICE
from trainer.runtime.seeding import resolve_seed

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
    def __init__(self, job: Any, plan: Any, runtime: Any, diagnostics: Any, mirror: Any = None):
        """`diagnostics`: a `trainer.diagnostics.run.RunDiagnostics` (its environment already exported).
        `mirror`: a connected `trainer.storage.mirror.RunMirror` when the run directory is gs://."""
        self.job, self.plan, self.runtime, self.diagnostics, self.mirror = job, plan, runtime, diagnostics, mirror

    def run(self, contract: Any) -> FitResult:
        """Run the fit of `contract` (a `trainer.contract.binding.ModuleContract`: the module, its data)."""
        seeding = resolve_seed(self.job.trainer.seed)  # before anything draws from the RNG
        # Handlers first: a SIGTERM during set-up must not kill the process half-way.
        with StopRequest() as stop, contract.attached():
            place = open_run(self.job, self.plan, self.runtime, self.mirror, seeding,
                             hyper_parameters(contract.module))
            finished = False
            try:
                self._log_start()
                self.diagnostics.start(pjrt_device=self.plan.env.get(PJRT_DEVICE, ""),
                                       xla_version=self.runtime.xla_version, run_dir=place.path)  # before tensor work
                self._describe_runtime(contract.facts, place)
                fit = build_fit(self.job, self.plan, self.runtime, self.diagnostics, place, self.mirror, contract,
                                seeding)
                if stop.requested:  # signalled during set-up: nothing new to save
                    raise TrainingInterrupted(stop.signum, None)
                epochs = EpochRunner(fit, place, self.job.trainer, self.runtime, self.diagnostics, stop,
                                     lambda: self._push_outputs(place))
                fit.hooks.call("on_train_start")
                for epoch in fit.progress.epochs():
                    epochs.run_epoch(epoch)
                    if fit.progress.done:
                        break
                contract.facts.stage = "done"
                fit.hooks.call("on_train_end")
                fit.hooks.call("on_fit_end")
                contract.data.teardown()
                result = self._finish(place, fit, epochs)
                finished = True
                return result
            finally:
                if not finished:  # an open profile window is still written; the summary is not
                    self.diagnostics.finish(place.path)
                place.outputs.close()  # everything on disk: now the last push
                self._push_outputs(place, raising=finished, flush=False)
                if self.mirror is not None:
                    self.mirror.release_worker_log()

    def _describe_runtime(self, facts: Any, place: RunPlace) -> None:
        """What self.trainer reports about where the fit runs."""
        rt = self.runtime
        facts.device, facts.run_dir = rt.device, place.path
        facts.process_index, facts.process_count = rt.process_index, rt.process_count
        facts.num_devices = self.plan.selection.count * rt.process_count

    def _log_start(self) -> None:
        plan, rt = self.plan, self.runtime
        log.info("training on %s (%s), %s, precision %s, torch %s, torch_xla %s",
                 plan.selection.describe(plan.parallel.fully_sharded), rt.device, plan.parallel.describe(),
                 self.job.trainer.precision, rt.torch_version, rt.xla_version)

    def _push_outputs(self, place: RunPlace, raising: bool = False, flush: bool = True) -> None:
        """Publish changed output files to a gs:// run directory (process 0; the others: their log).

        Only the last push after a finished fit raises: an epoch's push that fails (after
        gcsfs's retries) is retried by the next one, and while another error propagates
        this one is only logged. Checkpoints are published separately, and always raise."""
        if self.mirror is None:
            return
        if flush:
            place.outputs.flush()
        try:
            self.mirror.push_outputs(everything=place.outputs.enabled)
        except Exception as exc:  # noqa: BLE001 - reported either way, with where the files are
            if raising:
                raise
            log.warning("could not publish the outputs to %s (%r); they are in %s and the next push retries",
                        place.url, exc, place.path)

    def _finish(self, place: RunPlace, fit: Any, epochs: EpochRunner) -> FitResult:
        if fit.reporter.non_finite_steps:
            log.warning("the loss was NaN/inf at logged steps %s", fit.reporter.non_finite_steps[:10])
        metrics = epochs.metrics
        if not epochs.compiles:  # a checkpoint already finished the run
            log.info("the checkpoint already completed %d epoch(s) and %d step(s); nothing to train (raise "
                     "--max-epochs or --max-steps to continue)", fit.progress.first_epoch - 1,
                     fit.progress.global_step)
            metrics = {k: v for k, v in (place.outputs.history or [{}])[-1].items() if k.endswith(("loss", "accuracy"))}
        result = FitResult(metrics=metrics, history=place.outputs.history, run_dir=place.path,
                           compiles_per_epoch=epochs.compiles, run_url=place.url)
        self._write_summary(place, result)
        return result

    def _write_summary(self, place: RunPlace, result: FitResult) -> None:
        history, plan = result.history, self.plan
        summary = {
            **dict(result.metrics),
            "epochs": len(history),
            "global_step": history[-1]["global_step"] if history else 0,
            "compiles_per_epoch": result.compiles_per_epoch,
            "compiles_after_first_epoch": sum(result.compiles_per_epoch[1:]),
            "devices": plan.selection.count,
            "device_index": plan.selection.index,
            "strategy": self.job.parallel.strategy,
            "mesh": plan.parallel.mesh.describe() if plan.parallel.mesh else None,
            "precision": self.job.trainer.precision,
            "env_profile": plan.profile.name,
            "torch": self.runtime.torch_version,
            "torch_xla": self.runtime.xla_version,
            "mean_samples_per_second_after_first_epoch": _mean([r["samples_per_second"] for r in history[1:]]),
            **self.diagnostics.finish(place.path),
        }
        place.outputs.write_summary(summary)
        place.outputs.plot()


def _mean(values: list) -> float | None:
    return round(sum(values) / len(values), 1) if values else None
