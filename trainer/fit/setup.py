"""A fit's parts, built once in a straight line and handed over as one typed object.

    seed -> precision -> module to the device -> sharded -> optimizer and schedule
    -> data on the device -> metrics and the step loop -> checkpointer -> step counter
    -> the checkpoint's state restored (a resumed run)

Every part is built from the job config, the runtime plan and the started runtime; the
session only runs what this returns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.checkpoint.checkpointer import Checkpointer
from trainer.checkpoint.state import TrainState, loader_generators, restore_training_state
from trainer.data.batches import FixedShapeBatches
from trainer.data.device_loader import BatchTransfer, DeviceLoader
from trainer.data.sampling import shard_loader
from trainer.data.shards_loader import ShardsLoader, is_token_shards
from trainer.errors import UserError
from trainer.fit.loop import EpochLoop, StepParts
from trainer.fit.metrics import DeviceAccumulators, TrainingMetrics, ValidationMetrics
from trainer.fit.model_setup import move_module, repoint_optimizer
from trainer.fit.precision import Precision
from trainer.fit.progress import Progress, validation_every
from trainer.fit.reporter import StepReporter
from trainer.fit.run_directory import RunPlace
from trainer.fit.schedules import LrSchedule, optimizers
from trainer.fit.step_logs import StepLogs
from trainer.parallel.sharding import prepare_module, shard_gradients
from trainer.runtime.seeding import seed_device, seed_everything


@dataclass
class Fit:
    """Everything one fit trains with."""

    module: Any
    state: TrainState
    """Module, optimizer, scheduler and accumulators: what a checkpoint captures."""
    schedule: LrSchedule
    train: DeviceLoader
    val: DeviceLoader | None
    logs: StepLogs
    """Where the module's self.log writes while the fit runs."""
    reporter: StepReporter
    loop: EpochLoop
    checkpointer: Checkpointer
    progress: Progress
    generators: list
    """The train loader's torch.Generators (its shuffle order), saved with the host RNG."""


def build_fit(job: Any, plan: Any, runtime: Any, diagnostics: Any, place: RunPlace, mirror: Any, module: Any,
              train_loader: Any, val_loader: Any) -> Fit:
    cfg, parallel, rt = job.trainer, job.parallel, runtime
    precision = Precision(cfg.precision)
    fully_sharded = plan.parallel.fully_sharded
    seed_everything(cfg.seed)
    seed_device(cfg.seed, rt.device)
    module = precision.convert_module(module)
    moved = move_module(module, rt.device)
    prepare_module(module, plan.parallel, rt.mesh, parallel.fsdp_wrap, parallel.activation_checkpointing)
    schedule = optimizers(module.configure_optimizers())
    repoint_optimizer(schedule.optimizer, moved)

    train_loader, val_loader = choose_loaders(job.data, module, train_loader, val_loader)
    check_shards_fit(module, train_loader, val_loader)
    train = _device_loader(train_loader, cfg, plan, rt, precision)
    val = _device_loader(val_loader, cfg, plan, rt, precision) if val_loader is not None else None

    accumulators = DeviceAccumulators(rt.device)
    logs, reporter = StepLogs(), StepReporter(place.outputs.log_step)
    samples = (train.batches.full_size or 0) * rt.process_count * cfg.accumulate_grad_batches
    loop = EpochLoop(StepParts(
        module, schedule.optimizer, schedule, precision, logs, TrainingMetrics(accumulators, reporter),
        ValidationMetrics(accumulators), diagnostics, gradient_clip_val=cfg.gradient_clip_val,
        after_backward=(lambda: shard_gradients(module)) if fully_sharded else (lambda: None),
        samples_per_step=samples))
    state = TrainState(module, schedule.optimizer, schedule.scheduler, accumulators)
    checkpointer = Checkpointer(job.checkpoint, place.store, job.to_dict(), rt, sharded=fully_sharded,
                                on_commit=mirror.publish_checkpoints if mirror else None)
    progress = Progress(cfg.max_epochs, cfg.log_every_n_steps, cfg.accumulate_grad_batches, cfg.max_steps,
                        validation_every(cfg.val_check_interval, len(train), cfg.accumulate_grad_batches)
                        if val is not None else 0)
    if place.resumed is not None:
        saved = place.resumed.state
        restore_training_state(place.resumed, state, rt, sharded=fully_sharded)
        schedule.after_restore()
        progress = progress.resumed(saved["position"]["epoch"], saved["position"]["batch"], saved["global_step"])
    return Fit(module, state, schedule, train, val, logs, reporter, loop, checkpointer, progress,
               loader_generators(train.batches.loader))


def choose_loaders(data: Any, module: Any, train_loader: Any, val_loader: Any) -> tuple[Any, Any]:
    """The fit's loaders: those handed to `fit` win over the job's `data:` shards, which win over
    the module's own train_dataloader()/val_dataloader()."""
    if data.path and (train_loader is None or val_loader is None):
        from trainer.data.tokens.token_shards import TokenShards  # only for jobs that train on shards

        def shards(split: str) -> Any:
            return TokenShards(data.path, seq_len=data.seq_len, global_batch_size=data.global_batch_size,
                               seed=data.seed, packing=data.packing, split=split,
                               validation_fraction=data.validation_fraction)

        train_loader = train_loader if train_loader is not None else shards("train")
        val_loader = val_loader if val_loader is not None else (shards("validation") if data.validation_fraction
                                                                else None)
    train_loader = train_loader if train_loader is not None else module.train_dataloader()
    val_loader = val_loader if val_loader is not None else module.val_dataloader()
    return train_loader, val_loader


def check_shards_fit(module: Any, *loaders: Any) -> None:
    """Token shards whose vocabulary or sequence length the model cannot take: a UserError now, on
    the host, not an index error inside the first compiled step. The model's sizes are read where
    Hugging Face keeps them (get_input_embeddings, config.n_positions / max_position_embeddings),
    else from its first nn.Embedding."""
    import torch

    shards = [loader for loader in loaders if is_token_shards(loader)]
    if not shards:
        return
    getter = getattr(module, "get_input_embeddings", None) or getattr(getattr(module, "model", None),
                                                                       "get_input_embeddings", None)
    embedding = getter() if callable(getter) else next(
        (m for m in module.modules() if isinstance(m, torch.nn.Embedding)), None)
    config = getattr(module, "config", None) or getattr(getattr(module, "model", None), "config", None)
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    for loader in shards:
        if embedding is not None:
            loader.check_model(embedding.num_embeddings, positions)


def _device_loader(loader: Any, cfg: Any, plan: Any, rt: Any, precision: Precision) -> DeviceLoader:
    """This host's share of `loader`, in fixed shapes, copied to the device ahead of the step."""
    selection = plan.selection
    if is_token_shards(loader):  # the shards pick this host's rows of each global batch themselves
        loader = ShardsLoader(loader, rt.process_index, rt.process_count, selection.count * rt.process_count)
    else:
        loader = shard_loader(loader, rt.process_index, rt.process_count, cfg.seed)
    batches = FixedShapeBatches(loader, cfg.last_batch)
    if selection.spmd and batches.full_size and batches.full_size % selection.count:
        raise UserError(
            f"the batch size {batches.full_size} cannot be split evenly over {selection.count} devices (SPMD "
            f"gives each device an equal shard). Fix: use a batch size that is a multiple of {selection.count}."
        )
    transfer = BatchTransfer(rt.device, rt.mesh, minibatch=rt.process_count > 1, cast=precision.convert_input)
    return DeviceLoader(batches, transfer, prefetch=cfg.prefetch_batches)

