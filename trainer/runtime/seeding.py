"""Seeds: the engine seeds only when asked, and always knows the seed it ran with.

Asked means `Trainer(seed=...)`, the job YAML's `trainer.seed`, or `--seed` (a job, and so
the CLI, defaults to 0: it has no other place to seed before its module is built). Then the
fit seeds Python, NumPy, torch and the XLA generator at its start. Otherwise the host's
random state is left exactly as the user's script set it (Lightning's Trainer does not
reseed either), so a `setup()` that splits data at random draws what it draws under
Lightning, and the XLA generator, which exists only once the runtime has started, is
seeded from Lightning's `PL_GLOBAL_SEED` (set by `seed_everything`) or else from
torch's own seed (`torch.initial_seed()`). That seed is recorded in the run's manifest;
an exact resume needs no seed at all (a checkpoint holds the RNG states themselves).
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

from trainer.runtime import backend

PL_GLOBAL_SEED = "PL_GLOBAL_SEED"


@dataclass(frozen=True)
class Seeding:
    seed: int
    """The seed of the XLA generator and of the multi-host shuffle order."""
    source: str
    """trainer.seed, PL_GLOBAL_SEED or torch.initial_seed."""

    @property
    def seeds_host(self) -> bool:
        """Only an explicit seed reseeds the host's generators at the fit's start."""
        return self.source == "trainer.seed"


def resolve_seed(seed: int | None) -> Seeding:
    if seed is not None:
        return Seeding(int(seed), "trainer.seed")
    env = os.environ.get(PL_GLOBAL_SEED, "")
    if env.strip().lstrip("-").isdigit():
        return Seeding(int(env), PL_GLOBAL_SEED)
    import torch

    return Seeding(torch.initial_seed() % 2**63, "torch.initial_seed")


def seed_everything(seed: int) -> int:
    """Seed Python, NumPy and torch (CPU); returns the seed (Lightning's spelling and contract)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return seed


def seed_device(seed: int, device: Any) -> None:
    """The XLA device's generator (dropout and friends on the device)."""
    backend.set_rng_seed(seed, device)
