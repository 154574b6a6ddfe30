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

from trainer.checkpoint import to_cpu

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


def capture_training_state(module: Any, optimizer: Any, scheduler: Any, accumulators: Any, device: Any) -> dict:
    """Host copies of the device state; call at a step boundary (after torch_xla.sync())."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    # Sync so nothing is pending, but keep the sync invisible to the XLA RNG (each sync
    # advances its seed): a run that saves must draw the same numbers as one that does not.
    rng = int(xm.get_rng_state(device))
    torch_xla.sync()
    xm.set_rng_state(rng, device=device)
    xm.wait_device_ops()  # the values must be those after the last step, not in flight
    state = to_cpu({
        "module": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "accumulators": dict(accumulators.sums),
    })
    state["scheduler"] = scheduler.state_dict() if scheduler is not None else None
    state["xla_rng"] = rng
    return state


def restore_training_state(state: dict, module: Any, optimizer: Any, scheduler: Any, accumulators: Any, device: Any) -> None:
    """Load a checkpoint's state onto the device (module, optimizer, scheduler, accumulators)."""
    import torch_xla

    module.load_state_dict(state["module"])  # copy_ into the existing device parameters
    optimizer.load_state_dict(state["optimizer"])  # torch moves state to each parameter's device
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    accumulators.sums = {k: v.to(device) for k, v in state["accumulators"].items()}
    torch_xla.sync()  # materialise the uploads as device data before the first step


def restore_xla_rng(state: dict, device: Any) -> None:
    """Call right before the first resumed step: every sync in between would advance it."""
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(state["xla_rng"], device=device)


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
