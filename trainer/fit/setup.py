"""A fit's parts, built once in a straight line (Lightning's order) and handed over as one typed object.

    seed (only when asked) -> prepare_data, setup("fit") -> configure_model (on the device,
    sharded as it is built) -> precision -> module to the device -> sharded ->
    configure_optimizers (self.trainer already attached) -> the checkpoint's state
    restored (a resumed run: on_load_checkpoint first) -> on_fit_start -> the dataloaders
    on the device -> metrics and the step loop -> checkpointer

Every part is built from the job config, the runtime plan, the started runtime and the
module's contract; the session only runs what this returns.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from trainer.checkpoint.checkpointer import Checkpointer
from trainer.checkpoint.state import TrainState, loader_generators, restore_training_state
from trainer.contract.hparams import hyper_parameters
from trainer.contract.lightning import check_optimizers
from trainer.contract.trainer_view import SchedulerConfig
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
from trainer.parallel.sharding import creating_on_device, prepare_module, shard_gradients
from trainer.runtime.seeding import Seeding, seed_device, seed_everything

log = logging.getLogger(__name__)


@dataclass
class Fit:
    """Everything one fit trains with."""

    module: Any
    state: TrainState
    """Module, optimizer, scheduler and accumulators: what a checkpoint captures."""
    schedule: LrSchedule
    train: DeviceLoader
    val: DeviceLoader | None
    contract: Any
    """The module's side (`trainer.contract.binding.ModuleContract`): hooks, self.trainer, self.log."""
    reporter: StepReporter
    loop: EpochLoop
    checkpointer: Checkpointer
    progress: Progress
    generators: list
    """The train loader's torch.Generators (its shuffle order), saved with the host RNG."""

    @property
    def hooks(self) -> Any:
        return self.contract.hooks


def build_fit(job: Any, plan: Any, runtime: Any, diagnostics: Any, place: RunPlace, mirror: Any, contract: Any,
              seeding: Seeding) -> Fit:
    cfg, parallel, rt, hooks, module = job.trainer, job.parallel, runtime, contract.hooks, contract.module
    precision = Precision(cfg.precision)
    fully_sharded = plan.parallel.fully_sharded
    if seeding.seeds_host:
        seed_everything(seeding.seed)
    seed_device(seeding.seed, rt.device)
    contract.data.prepare()
    if job.data.path:  # the job's token shards, unless fit() was given loaders
        contract.data.default_to(*token_shards(job.data))
    with creating_on_device(rt.device, rt.mesh, fully_sharded):
        hooks.call("configure_model")
    module = precision.convert_module(module)
    moved = move_module(module, rt.device)
    prepare_module(module, plan.parallel, rt.mesh, parallel.fsdp_wrap, parallel.activation_checkpointing)
    facts = contract.facts
    facts.train_batches = lambda: _planned_batches(contract.data.train_loader(), cfg.last_batch, rt.process_count)
    returned = hooks.run_as("configure_optimizers", module.configure_optimizers)
    check_optimizers(returned, type(module).__name__)
    schedule = optimizers(returned)
    repoint_optimizer(schedule.optimizer, moved)
    facts.optimizers = [schedule.optimizer]
    if schedule.scheduler is not None:
        facts.lr_scheduler_configs = [SchedulerConfig(schedule.scheduler, schedule.interval, schedule.frequency,
                                                      schedule.monitor)]

    accumulators = DeviceAccumulators(rt.device)
    state = TrainState(module, schedule.optimizer, schedule.scheduler, accumulators)
    progress = Progress(cfg.max_epochs, cfg.log_every_n_steps, cfg.accumulate_grad_batches, cfg.max_steps)
    if place.resumed is not None:
        saved = place.resumed.state
        hooks.call("on_load_checkpoint", saved)
        restore_training_state(place.resumed, state, rt, sharded=fully_sharded)
        schedule.after_restore()
        progress = progress.resumed(saved["position"]["epoch"], saved["position"]["batch"], saved["global_step"])
    facts.progress = progress
    hooks.call("on_fit_start")

    check_shards_fit(module, contract.data.train_loader(), contract.data.val_loader())
    train = device_loader(contract.data.train_loader(), cfg, plan, rt, precision, seeding.seed)
    val_loader = contract.data.val_loader()
    val = device_loader(val_loader, cfg, plan, rt, precision, seeding.seed) if val_loader is not None else None
    facts.train_batches = lambda: len(train)
    facts.val_batches = (lambda: len(val)) if val is not None else None
    if contract.lightning:
        _warn_batch_size(train.batches.full_size, plan.selection.count * rt.process_count)
    progress.val_every = validation_every(cfg.val_check_interval, len(train), cfg.accumulate_grad_batches) \
        if val is not None else 0

    logs, reporter = contract.logs, StepReporter(place.outputs.log_step)
    samples = (train.batches.full_size or 0) * rt.process_count * cfg.accumulate_grad_batches
    loop = EpochLoop(StepParts(
        module, schedule.optimizer, schedule, precision, logs, TrainingMetrics(accumulators, reporter, logs),
        ValidationMetrics(accumulators, logs), diagnostics, gradient_clip_val=cfg.gradient_clip_val,
        after_backward=(lambda: shard_gradients(module)) if fully_sharded else (lambda: None),
        samples_per_step=samples, hooks=hooks, facts=facts))
    checkpointer = Checkpointer(job.checkpoint, place.store, job.to_dict(), rt, sharded=fully_sharded,
                                on_commit=mirror.publish_checkpoints if mirror else None,
                                on_save=hooks.bound["on_save_checkpoint"] and
                                (lambda checkpoint: hooks.call("on_save_checkpoint", checkpoint)),
                                hyper_parameters=hyper_parameters(module))
    return Fit(module, state, schedule, train, val, contract, reporter, loop, checkpointer, progress,
               loader_generators(train.batches.loader))


def _planned_batches(loader: Any, last_batch: str, processes: int) -> int:
    """Batches per epoch this host will run, before its device loader exists (e.g. inside configure_optimizers)."""
    if is_token_shards(loader):  # every host runs every global batch, its own rows of it
        return len(loader)
    total = len(loader)
    size, rows = getattr(loader, "batch_size", None), len(getattr(loader, "dataset", ()) or ())
    if last_batch == "drop" and size and rows % size and not getattr(loader, "drop_last", False):
        total -= 1
    return -(-total // processes)


def _warn_batch_size(batch: int | None, devices: int) -> None:
    if devices > 1 and batch:
        log.warning(
            "a LightningModule's DataLoader batch is per device under Lightning (batch_size=%d on %d devices trains "
            "%d rows per step); tpu-trainer reads one loader per host and splits its batch over the mesh, so each "
            "step trains %d rows (%s per device). To train as under Lightning, use batch_size=%d.",
            batch, devices, batch * devices, batch, batch // devices if batch % devices == 0 else batch / devices,
            batch * devices)


def token_shards(data: Any) -> tuple[Any, Any]:
    """The job's `data:` section as (train, validation) token shards (validation None at fraction 0)."""
    from trainer.data.tokens.token_shards import TokenShards  # only for jobs that train on shards

    def shards(split: str) -> Any:
        return TokenShards(data.path, seq_len=data.seq_len, global_batch_size=data.global_batch_size,
                           seed=data.seed, packing=data.packing, split=split,
                           validation_fraction=data.validation_fraction)

    return shards("train"), shards("validation") if data.validation_fraction else None


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


def device_loader(loader: Any, cfg: Any, plan: Any, rt: Any, precision: Precision, seed: int) -> DeviceLoader:
    """This host's share of `loader`, in fixed shapes, copied to the device ahead of the step."""
    selection = plan.selection
    if is_token_shards(loader):  # the shards pick this host's rows of each global batch themselves
        loader = ShardsLoader(loader, rt.process_index, rt.process_count, selection.count * rt.process_count)
    else:
        loader = shard_loader(loader, rt.process_index, rt.process_count, seed)
    batches = FixedShapeBatches(loader, cfg.last_batch)
    if selection.spmd and batches.full_size and batches.full_size % selection.count:
        raise UserError(
            f"the batch size {batches.full_size} cannot be split evenly over {selection.count} devices (SPMD "
            f"gives each device an equal shard). Fix: use a batch size that is a multiple of {selection.count}."
        )
    transfer = BatchTransfer(rt.device, rt.mesh, minibatch=rt.process_count > 1, cast=precision.convert_input)
    return DeviceLoader(batches, transfer, prefetch=cfg.prefetch_batches)
