"""Trainer.validate / test / predict: one pass over a loader without training, as Lightning's.

    the loader          given; else the datamodule's or the module's own *_dataloader, after
                        prepare_data and setup(stage) (the datamodule's first, as in Lightning)
    the module          on the device and sharded as a fit puts it (configure_model included);
                        a module a fit in this process left on the device is used as it is
    ckpt_path           "last": the run directory's newest checkpoint that verifies; "best":
                        the same (no monitored checkpoint rule yet: Lightning's ModelCheckpoint
                        without a monitor also calls its last save the best); PATH: that file
                        (or sharded directory), verified against the index beside it
    validation / test   masked means over the real rows, summed on the device, one host read
                        at the end: [{"val_loss": ...}] / [{"test_loss": ...}] as Lightning returns
    predict             each batch's outputs read to the host while the next batch runs, the
                        padding rows cut off, in order: one entry per batch, as Lightning's

Nothing is written to a run directory; the hooks run with Lightning's names and order.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint.resume import find_resume
from trainer.contract.lightning import overrides
from trainer.data.batches import map_tensors, tensors_of
from trainer.errors import UserError
from trainer.fit.metrics import DeviceAccumulators, ValidationMetrics, read_values
from trainer.fit.model_setup import move_module
from trainer.fit.precision import Precision
from trainer.fit.setup import device_loader
from trainer.parallel.sharding import creating_on_device, prepare_module
from trainer.runtime import backend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    step: str
    loader: str
    hooks: str
    """Lightning's hook infix: on_{hooks}_start, on_{hooks}_batch_end, ..."""
    prefix: str | None
    """What returned names get (val_loss); None: predictions, not metrics."""


STAGES = {"validate": Stage("validation_step", "val_dataloader", "validation", "val"),
          "test": Stage("test_step", "test_dataloader", "test", "test"),
          "predict": Stage("predict_step", "predict_dataloader", "predict", None)}


def evaluate(stage_name: str, job: Any, plan: Any, runtime: Any, contract: Any, dataloaders: Any,
             ckpt_path: str | None, run_dir: str | None) -> list:
    """Run `stage_name` ("validate", "test" or "predict") of `contract`'s module; Lightning's result.
    validation_step and test_step must be the module's own; predict_step may be the default (forward)."""
    stage, cfg, module, hooks = STAGES[stage_name], job.trainer, contract.module, contract.hooks
    if not (overrides(module, stage.step) or stage.prefix is None and callable(getattr(module, stage.step, None))):
        raise UserError(f"Trainer.{stage_name} needs {type(module).__name__}.{stage.step}(batch, batch_idx), which it "
                        f"does not define. Fix: define {stage.step}, or call the Trainer method that matches the "
                        "steps the module has.")
    precision = Precision(cfg.precision)
    facts = contract.facts
    facts.device, facts.process_index, facts.process_count = runtime.device, runtime.process_index, runtime.process_count
    facts.num_devices = plan.selection.count * runtime.process_count
    facts.stage = stage_name
    loader = _stage_loader(stage_name, contract, dataloaders)
    _on_device(contract, job, plan, runtime, precision)
    if ckpt_path:
        _load_weights(module, ckpt_path, run_dir, stage_name, runtime)
    batches = device_loader(loader, cfg, plan, runtime, precision, job.trainer.seed or 0)
    module.eval()
    with torch.no_grad():
        hooks.call(f"on_{stage.hooks}_start")
        hooks.call(f"on_{stage.hooks}_epoch_start")
        hooks.enter(stage.step)
        if stage.prefix is None:
            result = _predict(module, batches, precision, hooks)
        else:
            metrics = ValidationMetrics(DeviceAccumulators(runtime.device), contract.logs, prefix=stage.prefix)
            result = [_metrics(module, stage, batches, precision, hooks, contract.logs, metrics)]
            facts.record(result[0])
        hooks.call(f"on_{stage.hooks}_epoch_end")
        hooks.call(f"on_{stage.hooks}_end")
    if stage.prefix is not None:
        logged = read_values(contract.logs.take_epoch_values())  # what the epoch hooks logged
        result[0].update(logged)
        facts.record(logged)
    _teardown(contract, stage_name)
    return result


def _stage_loader(stage_name: str, contract: Any, dataloaders: Any) -> Any:
    """The one loader of the stage: given, the datamodule's, or the module's own (set-up hooks first)."""
    stage, module, dm = STAGES[stage_name], contract.module, contract.datamodule
    if dm is not None and callable(getattr(dm, "prepare_data", None)):
        dm.prepare_data()
    contract.hooks.call("prepare_data")
    if dm is not None and callable(getattr(dm, "setup", None)):
        dm.setup(stage_name)
    contract.hooks.call("setup", stage_name)
    if dataloaders is None:
        owner = dm if dm is not None and overrides(dm, stage.loader) else module
        dataloaders = getattr(owner, stage.loader)() if overrides(owner, stage.loader) else None
    if isinstance(dataloaders, (list, tuple)):
        if len(dataloaders) != 1:
            raise UserError(f"Trainer.{stage_name} got {len(dataloaders)} dataloaders; tpu-trainer runs one loader "
                            "per call. Fix: call it once per loader.")
        dataloaders = dataloaders[0]
    if dataloaders is None:
        raise UserError(f"Trainer.{stage_name} has no data: pass dataloaders=..., a datamodule with {stage.loader}(), "
                        f"or define {type(module).__name__}.{stage.loader}().")
    return dataloaders


def _on_device(contract: Any, job: Any, plan: Any, runtime: Any, precision: Precision) -> None:
    """Built, moved and sharded as a fit does, unless a fit in this process already did."""
    module = contract.module
    params = list(module.parameters())
    if params and all(p.device.type == "xla" for p in params):
        return
    with creating_on_device(runtime.device, runtime.mesh, plan.parallel.fully_sharded):
        contract.hooks.call("configure_model")
    precision.convert_module(module)
    move_module(module, runtime.device)
    prepare_module(module, plan.parallel, runtime.mesh, job.parallel.fsdp_wrap, job.parallel.activation_checkpointing)


def _load_weights(module: Any, ckpt_path: str, run_dir: str | None, stage_name: str, runtime: Any) -> None:
    """Lightning's ckpt_path: "last" / "best" (the newest checkpoint of the run directory) or a path."""
    if ckpt_path in ("best", "last"):
        if not run_dir:
            raise UserError(f"Trainer.{stage_name}(ckpt_path={ckpt_path!r}) reads the checkpoints of a fit's run "
                            "directory, and this Trainer has none: it has not run fit, and no run_dir is set. Fix: "
                            "Trainer(run_dir=RUN_DIR) of the fit, or ckpt_path=RUN_DIR/checkpoints/FILE.")
        if ckpt_path == "best":
            log.info("ckpt_path='best': no checkpoint rule monitors a metric, so the best is the last one saved "
                     "(as with Lightning's ModelCheckpoint without a monitor)")
        loaded = find_resume("auto", Path(run_dir))
        if loaded is None:
            raise UserError(f"Trainer.{stage_name}(ckpt_path={ckpt_path!r}): {run_dir} holds no checkpoint. Fix: "
                            "fit first, or pass the path of a checkpoint.")
    else:
        if not Path(ckpt_path).exists():
            raise UserError(f"Trainer.{stage_name}(ckpt_path={ckpt_path!r}): no such checkpoint. Fix: a file (or, "
                            "for a sharded model, a directory) under RUN_DIR/checkpoints/, 'last' or 'best'.")
        loaded = find_resume(ckpt_path, None)
    if loaded.sharded_dir is not None:
        from trainer.checkpoint.sharded import read_sharded

        read_sharded(loaded.sharded_dir, module, None, spmd=runtime.mesh is not None)
    else:
        module.load_state_dict(loaded.state["module"])  # copy_ into the device parameters
    backend.sync()
    log.info("weights from %s (step %d)", loaded.path, loaded.state["global_step"])


def _metrics(module: Any, stage: Stage, batches: Any, precision: Precision, hooks: Any, logs: Any,
             metrics: ValidationMetrics) -> dict:
    step = getattr(module, stage.step)
    for batch_idx, item in enumerate(batches):
        batch, mask = item
        hooks.call(f"on_{stage.hooks}_batch_start", batch, batch_idx)
        with precision.autocast():
            out = step(batch, batch_idx)
        hooks.call(f"on_{stage.hooks}_batch_end", out, batch, batch_idx)
        metrics.add_batch(out, logs.take(), mask, item.rows)
        backend.sync()
    return metrics.read()


def _predict(module: Any, batches: Any, precision: Precision, hooks: Any) -> list:
    """Each batch's outputs on the host, padding removed; batch i is read while batch i+1 runs."""
    predictions: list = []
    pending = None
    for batch_idx, item in enumerate(batches):
        batch, mask = item
        hooks.call("on_predict_batch_start", batch, batch_idx)
        with precision.autocast():
            out = module.predict_step(batch, batch_idx)
        hooks.call("on_predict_batch_end", out, batch, batch_idx)
        backend.sync()
        if pending is not None:
            predictions.append(_to_host(*pending))
        pending = (out, item.rows, mask.shape[0])
    if pending is not None:
        predictions.append(_to_host(*pending))
    return predictions


def _to_host(out: Any, rows: int, full: int) -> Any:
    """`out` with every tensor on the host (one transfer) and the padded rows cut off."""
    host = iter(backend.to_host(tensors_of(out)))

    def real(_: torch.Tensor) -> torch.Tensor:
        tensor = next(host)
        return tensor[:rows] if tensor.dim() and tensor.shape[0] == full and rows < full else tensor

    return map_tensors(out, real)


def _teardown(contract: Any, stage_name: str) -> None:
    dm = contract.datamodule
    if dm is not None and callable(getattr(dm, "teardown", None)):
        dm.teardown(stage_name)
    contract.hooks.call("teardown", stage_name)
