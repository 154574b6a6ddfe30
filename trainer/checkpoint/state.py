"""Everything a resumed run needs to continue bit for bit, captured and restored.

Data position: we record the random state at the *start* of the epoch (Python, NumPy,
torch CPU, and every `torch.Generator` the train loader draws from) plus how many
batches of the epoch were consumed. On resume the states are restored, the loader is
iterated afresh, and the consumed batches are skipped on the host (read, never sent to
the device). Replaying the host side also replays any host randomness the dataset's
`__getitem__` uses, so the next batch is exactly the one the interrupted run would have
seen. It works for any map-style DataLoader without changing the user's code (unlike
torchdata's StatefulDataLoader); the cost is re-reading the skipped batches once.

Device state: the XLA RNG seed is read at a step boundary, where `torch_xla.sync()`
has just reset it to a plain integer, so restoring it is exact. Model, optimizer and the
run's device accumulators go to the host after a sync + `wait_device_ops`; restored
tensors are copied into device data (not graph constants), so the step graph a resumed
run compiles is the same one the uninterrupted run uses.
"""
from __future__ import annotations

import itertools
import random
from typing import Any, Iterator

import numpy as np
import torch

from trainer.runtime import backend
from trainer.checkpoint.io import to_cpu

STATE_FORMAT = 1


def loader_generators(loader: Any) -> list[torch.Generator]:
    """The torch.Generators a DataLoader draws its order (and worker seeds) from."""
    found: list[torch.Generator] = []
    candidates = [getattr(loader, "generator", None)]
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        candidates += [getattr(sampler, "generator", None), getattr(getattr(sampler, "inner", None), "generator", None)]
    for gen in candidates:
        if isinstance(gen, torch.Generator) and all(gen is not g for g in found):
            found.append(gen)
    return found


def capture_host_rng(generators: list[torch.Generator]) -> dict:
    """Host random states as checkpoint-safe values (tensors, ints, lists; no numpy objects)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.copy()), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "loader": [g.get_state() for g in generators],
    }


def restore_host_rng(state: dict, generators: list[torch.Generator]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if len(state["loader"]) != len(generators):
        raise ValueError(
            f"the checkpoint holds {len(state['loader'])} data-loader generator state(s) but the "
            f"train loader now has {len(generators)}: the data pipeline changed since it was saved."
        )
    for gen, saved in zip(generators, state["loader"]):
        gen.set_state(saved)


class TrainState:
    """The device state a checkpoint captures: module, optimizer, scheduler, the run's accumulators."""

    def __init__(self, module: Any, optimizer: Any, scheduler: Any, accumulators: Any):
        self.module, self.optimizer, self.scheduler, self.accumulators = module, optimizer, scheduler, accumulators


def capture_training_state(state: TrainState, device: Any, with_model: bool = True) -> dict:
    """Host copies of the device state; call at a step boundary (after the step's sync).

    `with_model=False` leaves the module and optimizer out (a sharded checkpoint writes
    those shard by shard, `trainer.checkpoint.sharded`); the device is settled either way.
    """
    # Sync so nothing is pending, but keep the sync invisible to the XLA RNG (each sync
    # advances its seed): a run that saves must draw the same numbers as one that does not.
    rng = backend.rng_seed(device)
    backend.sync()
    backend.set_rng_seed(rng, device)
    backend.wait_device_ops()  # the values must be those after the last step, not in flight
    tree = {"accumulators": dict(state.accumulators.sums)}
    if with_model:
        tree.update(module=state.module.state_dict(), optimizer=state.optimizer.state_dict())
    captured = to_cpu(tree)
    captured["scheduler"] = state.scheduler.state_dict() if state.scheduler is not None else None
    captured["xla_rng"] = rng
    return captured


def restore_training_state(loaded: Any, state: TrainState, runtime: Any, sharded: bool) -> None:
    """Load a verified checkpoint (`trainer.checkpoint.store.Loaded`) onto the device.

    Either format loads into either strategy: a sharded checkpoint reshards into this
    run's mesh (or one device); a whole one is copied into sharded parameters, and its
    optimizer state is then given their sharding (`sharded`: this run shards the model).
    """
    from trainer.parallel.sharding import shard_optimizer_state

    saved = loaded.state
    if loaded.sharded_dir is not None:
        from trainer.checkpoint.sharded import read_sharded

        read_sharded(loaded.sharded_dir, state.module, state.optimizer, spmd=runtime.mesh is not None)
    else:
        state.module.load_state_dict(saved["module"])  # copy_ into the existing device parameters
        state.optimizer.load_state_dict(saved["optimizer"])  # torch moves state to each parameter's device
    if sharded:
        shard_optimizer_state(state.optimizer)
    if state.scheduler is not None and saved.get("scheduler") is not None:
        state.scheduler.load_state_dict(saved["scheduler"])
    state.accumulators.sums = {k: v.reshape(1).to(runtime.device) for k, v in saved["accumulators"].items()}  # 0-d in older checkpoints
    backend.sync()  # materialise the uploads as device data before the first step


def restore_xla_rng(state: dict, device: Any) -> None:
    """Call right before the first resumed step: every sync in between would advance it."""
    backend.set_rng_seed(state["xla_rng"], device)


class SkipBatches:
    """The first `skip` batches of an epoch are read on the host and dropped (resume)."""

    def __init__(self, batches: Any, skip: int):
        self.batches, self.skip = batches, skip

    def __len__(self) -> int:
        return max(0, len(self.batches) - self.skip)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batches), self.skip, None)

    def __getattr__(self, name: str) -> Any:  # full_size and friends come from the inner batches
        return getattr(self.batches, name)
