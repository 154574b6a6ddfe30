"""What the engine does around `optimizer.step()`: nothing to the optimizer itself.

The optimizer runs exactly as `configure_optimizers` built it: torch's own code path (on
XLA the single-tensor one), the user's float learning rates, weight decay and
`capturable`. Its `param_groups` and what a checkpoint stores of them are the user's at
every moment, so they read back after `fit` as an eager-CPU run of the same schedule
leaves them, and the losses equal a hand-written torch_xla loop's bitwise.

Why the step still needs the engine (measured, torch_xla 2.9, `XLA_NO_SPECIAL_SCALARS=1`,
`tests/test_optimizer_view.py`): every Python number an op takes becomes device data, but
torch_xla keeps one device buffer per *value* and a graph takes one input per buffer. A
number that changes every step then merges with any equal number of the graph and the
graph changes: AdamW's `1 - lr * weight_decay` is 1.0 at a rate of exactly 0 (the same
value as the backward's seed: one compilation when a cosine reaches
0) and 0.999 at lr 1e-2 with weight_decay 0.1 (Adam's beta2: one compilation at the end of
the warm-up); Adam's bias correction `sqrt(1 - beta2**step)` rounds to 1.0 in float32 at
step 325 with beta2 0.95 (about 16,600 with 0.999). So `step` runs the optimizer with
torch_xla's device-data cache off (`backend.distinct_scalars`): each number is its own
input, equal or not, and the graph is the same every step. Nothing is read from the device.

The price is host time: the numbers torch's Adam uses per parameter (about seven) are
uploaded every step instead of found in the cache. Measured on CPU-XLA (a loaded 2-core
machine, medians of 50 steps, three runs), time to trace `optimizer.step()`: a 50-tensor MLP
on 1 device 32-45 ms against 25-32 ms with the cache (the hand loop); 18 tensors on 8
devices (SPMD, each upload goes to every device) 19-20 ms against 10 ms; the bench's MLP (6
tensors, 8 devices) 7.5-9.8 ms against 4.6-6.7 ms, in a step of about 90 ms. The rejected
alternative, a device-tensor learning rate with `capturable=True` swapped in around the step,
cost about as much (33-50, 13-20 and 5.5-7.9 ms in the same runs), is not torch's
non-capturable arithmetic (its losses leave the hand loop's after a few steps) and divides by
the step size, so a rate of exactly 0 would need a stand-in.

Checkpoints written by the engine before this module (up to commit 48b8924) hold groups
the engine had rewritten: `weight_decay` 0 (it applied AdamW's decay itself), `capturable`
True with the step counts on the device, a rate of 0 stored as 1e-12 and a private
`_tpu_trainer_lr_is_zero` key. `undo_legacy_rewrites` gives such groups back the user's
settings after a resume. `torch.optim.Adafactor` is refused: it reads two norms per
parameter to the host every step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trainer.errors import UserError
from trainer.runtime import backend

LEGACY_ZERO_KEY = "_tpu_trainer_lr_is_zero"
LEGACY_ZERO_STAND_IN = 1e-12


def check_optimizer(optimizer: Any) -> None:
    """Raise a UserError for an optimizer whose step reads the device (it could not run in one graph)."""
    adafactor = getattr(torch.optim, "Adafactor", None)
    if adafactor is not None and isinstance(optimizer, adafactor):
        raise UserError(
            "configure_optimizers() returned torch.optim.Adafactor, which reads two values from the device for "
            "every parameter in every step (param.norm().item() and update.norm().item() in torch 2.9): on XLA "
            "each read stops the host until the device has run the graph so far and cuts the step into many "
            "small graphs (measured: 8 reads and 5 graphs per step for 4 parameters). Fix: use torch.optim.AdamW "
            "(betas=(0.9, 0.95) and a per-step schedule are the usual replacement), or an Adafactor that keeps "
            "those norms on the device."
        )


def step(optimizer: Any) -> None:
    """`optimizer.step()` with every number it uses as its own graph input (see the module docstring)."""
    with backend.distinct_scalars():
        optimizer.step()


@dataclass(frozen=True)
class ConfiguredGroups:
    """The settings per group that the old engine overwrote, as `configure_optimizers` set them."""

    weight_decay: tuple
    capturable: tuple

    @classmethod
    def of(cls, optimizer: Any) -> "ConfiguredGroups":
        groups = optimizer.param_groups
        return cls(tuple(g.get("weight_decay") for g in groups), tuple(g.get("capturable") for g in groups))


def undo_legacy_rewrites(optimizer: Any, configured: ConfiguredGroups) -> bool:
    """Give groups restored from an old engine's checkpoint the user's settings; True if there were any.

    A rate stored as the stand-in reads 0.0 again, the decay the old engine applied itself goes back
    into `weight_decay`, and `capturable` forced on is switched off with the step counts back on the
    host, where torch keeps them for a non-capturable Adam (one read, at the resume).
    """
    groups = optimizer.param_groups
    if not any(LEGACY_ZERO_KEY in g for g in groups):
        return False
    moved: list[torch.Tensor] = []
    for index, group in enumerate(groups):
        if group.pop(LEGACY_ZERO_KEY, False) and group["lr"] == LEGACY_ZERO_STAND_IN:
            group["lr"] = 0.0
        user_decay = configured.weight_decay[index]
        if group.get("decoupled_weight_decay") and group.get("weight_decay") == 0.0 and user_decay:
            group["weight_decay"] = user_decay
        if group.get("capturable") and configured.capturable[index] is False:
            group["capturable"] = False
            moved += [p for p in group["params"] if "step" in optimizer.state.get(p, {})]
    on_device = [p for p in moved if optimizer.state[p]["step"].device.type != "cpu"]
    if on_device:
        counts = torch.stack([optimizer.state[p]["step"] for p in on_device]).cpu()
        for param, count in zip(on_device, counts):
            optimizer.state[param]["step"] = count.clone()
    return True
