"""One seed for every random number generator a run draws from.

Call `seed_everything(seed)` before building the model: its initial weights come from
torch's CPU generator, and an unseeded build makes every run differ from step 1 (the
CLI does this before it builds the module; `Trainer.fit` seeds again at its start, and
seeds the XLA device's generator, which exists only once the runtime has started).
"""
from __future__ import annotations

import random
from typing import Any

from trainer.runtime import backend


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
