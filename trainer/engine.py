"""`Trainer`: the engine's front door. Plain PyTorch in, XLA training out.

    trainer = Trainer(devices=8, precision="bf16", strategy="fsdp", max_epochs=10)
    result = trainer.fit(module, train_loader, val_loader)

`Trainer(...)` validates everything and plans the runtime without importing torch_xla.
`fit` exports the runtime's environment, starts XLA and hands the job, the plan and
the runtime to a `FitSession`, so the library and the CLI run exactly the same steps.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from trainer.config import JobConfig, TrainerConfig
from trainer.errors import UserError
from trainer.runtime.startup import RuntimePlan, apply_environment, plan_runtime, start_xla
from trainer.settings import Spelling
from trainer.trainer_options import split_options


class Trainer:
    def __init__(self, devices: Any = 1, precision: str = "fp32", max_epochs: int = 15, *,
                 job: JobConfig | None = None, spelling: Spelling = Spelling("python"), **options: Any):
        """Keyword options are the fields of the job's config sections: `TrainerConfig` (seed,
        max_steps, accumulate_grad_batches, gradient_clip_val, ...), `ParallelConfig` (strategy,
        mesh, ...), `DiagnosticsConfig` (debug, strict_compile, ...) and `CheckpointConfig`
        (every_n_steps, every_n_epochs, keep_last), plus Lightning's spellings of what we support
        (accelerator, enable_progress_bar, default_root_dir; `trainer.trainer_options`).

        Raises UserError for bad values before any XLA work, quoting them as `spelling` says
        the user wrote them (Python keywords here; the CLI passes its flags' spelling).
        """
        sections = split_options(options)
        self.config = TrainerConfig(devices=devices, precision=precision, max_epochs=max_epochs, **sections["trainer"])
        job = job or JobConfig()
        self.job = dataclasses.replace(
            job, trainer=self.config,
            **{name: dataclasses.replace(getattr(job, name), **values) for name, values in sections.items()
               if name != "trainer" and values})
        self.spelling = spelling
        self._mirror: Any = None
        self._fitted_run_dir: str | None = None
        """Where this Trainer's last fit wrote: ckpt_path="last"/"best" of validate/test/predict look there."""
        self.plan: RuntimePlan = plan_runtime(self.config.devices, self.config.env_profile,
                                              self.job.parallel.strategy, self.job.parallel.mesh, spelling)

    @classmethod
    def from_job(cls, job: JobConfig, spelling: Spelling = Spelling("cli")) -> "Trainer":
        fields = {f.name: getattr(job.trainer, f.name) for f in dataclasses.fields(job.trainer)}
        return cls(job=job, spelling=spelling, **fields)

    def check_run_dir(self) -> Any:
        """Connect a gs:// run directory and prove the bucket takes writes (UserError if not).

        `fit` does this first; the CLI calls it before it builds the model, so a missing
        bucket or permission fails in seconds. Returns the mirror (None for a local run)."""
        if self._mirror is None:
            from trainer.fit.run_directory import connect_remote

            self._mirror = connect_remote(self.config.run_dir, self.spelling.assign("run_dir", self.config.run_dir))
        return self._mirror

    def fit(self, module: Any, train_dataloaders: Any = None, val_dataloaders: Any = None, *,
            datamodule: Any = None) -> Any:
        """Train `module` (a TrainModule, or a LightningModule unchanged) on the loaders given, the
        `datamodule`'s, or the module's own; returns a `FitResult`. Raises `TrainingInterrupted` after
        SIGTERM/SIGINT, and UserError for what the engine cannot run, before any XLA work."""
        from trainer.contract.binding import ModuleContract
        from trainer.diagnostics.run import RunDiagnostics

        if datamodule is not None and (train_dataloaders is not None or val_dataloaders is not None):
            raise UserError("Trainer.fit got both dataloaders and a datamodule; Lightning refuses that too. Fix: "
                            "pass the loaders or datamodule=..., not both.")
        contract = ModuleContract(module, self.config, datamodule, train_dataloaders, val_dataloaders)
        mirror = self.check_run_dir()  # first: no bucket or no permission fails in seconds, before XLA
        diagnostics = RunDiagnostics(self.job.diagnostics, self.config.log_every_n_steps)
        apply_environment(self.plan, diagnostics.environment())  # debug mode's XLA variables too
        runtime = start_xla(self.plan)
        from trainer.fit.session import FitSession

        result = FitSession(self.job, self.plan, runtime, diagnostics, mirror).run(contract)
        self._fitted_run_dir = str(result.run_dir) if result.run_dir else None
        return result

    def validate(self, model: Any, dataloaders: Any = None, ckpt_path: str | None = None, verbose: bool = True,
                 datamodule: Any = None) -> list[dict]:
        """validation_step over `dataloaders` (or the datamodule's / module's val_dataloader):
        `[{"val_loss": ..., ...}]` as Lightning returns, means over the real rows."""
        return self._evaluate("validate", model, dataloaders, ckpt_path, datamodule)

    def test(self, model: Any, dataloaders: Any = None, ckpt_path: str | None = None, verbose: bool = True,
             datamodule: Any = None) -> list[dict]:
        """test_step over `dataloaders` (or test_dataloader()): `[{"test_loss": ..., ...}]`."""
        return self._evaluate("test", model, dataloaders, ckpt_path, datamodule)

    def predict(self, model: Any, dataloaders: Any = None, datamodule: Any = None, return_predictions: bool = True,
                ckpt_path: str | None = None) -> list | None:
        """predict_step over `dataloaders` (or predict_dataloader()): one host entry per batch, in order,
        the padding rows removed."""
        predictions = self._evaluate("predict", model, dataloaders, ckpt_path, datamodule)
        return predictions if return_predictions else None

    def _evaluate(self, stage: str, model: Any, dataloaders: Any, ckpt_path: str | None, datamodule: Any) -> list:
        from trainer.contract.binding import ModuleContract
        from trainer.contract.lightning import is_datamodule

        if model is None:
            raise UserError(f"Trainer.{stage}() needs the module: tpu-trainer does not keep the fitted one. Fix: "
                            f"trainer.{stage}(module, ...).")
        if is_datamodule(dataloaders):  # Lightning takes a datamodule in the dataloaders' place too
            dataloaders, datamodule = None, dataloaders
        if datamodule is not None and dataloaders is not None:
            raise UserError(f"Trainer.{stage} got both dataloaders and a datamodule; Lightning refuses that too. "
                            "Fix: pass one of them.")
        contract = ModuleContract(model, self.config, datamodule)
        apply_environment(self.plan, {})
        runtime = start_xla(self.plan)
        from trainer.fit.evaluate import evaluate

        with contract.attached():
            return evaluate(stage, self.job, self.plan, runtime, contract, dataloaders, ckpt_path,
                            self.config.run_dir or self._fitted_run_dir)


def __getattr__(name: str) -> Any:  # FitResult lives with the session (it imports torch)
    if name == "FitResult":
        from trainer.fit.session import FitResult

        return FitResult
    raise AttributeError(name)
