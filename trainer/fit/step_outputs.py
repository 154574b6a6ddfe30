"""What a user's steps return, turned into what the engine sums: losses and metrics.

`training_step` returns the loss (a scalar, or one value per sample for an exact mask
over padded rows) or Lightning's `{"loss": loss, ...}`; `validation_step` returns a
tensor, a dict of tensors, or nothing when it only logs. Anything else is a `UserError`
naming what came back.
"""
from __future__ import annotations

import inspect
import warnings
from typing import Any, Mapping

import torch

from trainer.errors import UserError


def masked_mean(values: torch.Tensor, mask: torch.Tensor, what: str) -> torch.Tensor:
    """Mean over the real rows; a scalar is returned as is (padded rows already in it)."""
    if values.dim() == 0:
        return values.float()
    if values.dim() != 1 or values.shape[0] != mask.shape[0]:
        raise UserError(
            f"{what} returned a tensor of shape {tuple(values.shape)}; return a scalar or one "
            f"value per sample (shape [{mask.shape[0]}], e.g. reduction='none')."
        )
    return (values.float() * mask).sum() / mask.sum()


def training_loss(out: Any) -> torch.Tensor:
    """The loss in what training_step returned: a tensor, or Lightning's {"loss": tensor, ...}."""
    if isinstance(out, Mapping):
        if "loss" not in out or not isinstance(out["loss"], torch.Tensor):
            got = ", ".join(f"{k!r}: {type(v).__name__}" for k, v in out.items()) or "nothing"
            raise UserError(
                f"training_step returned a dict without a tensor under 'loss' ({{{got}}}). Return the loss (a scalar "
                "or per-sample tensor), or {'loss': loss, ...}; log other values with self.log(name, value)."
            )
        out = out["loss"]
    if not isinstance(out, torch.Tensor):
        raise UserError(
            f"training_step returned {type(out).__name__} ({out!r:.80}); the engine needs the loss as a tensor (a "
            "scalar, or one value per sample with reduction='none'), or {'loss': loss, ...}. Skipping a step by "
            "returning None is not supported on XLA (every step runs the same compiled graph)."
        )
    return out


def validation_outputs(out: Any, logged: Mapping[str, Any]) -> Mapping[str, torch.Tensor]:
    """The named tensors validation_step returned ({} when it returned nothing: it only logs, as most
    Lightning code does, possibly through a torchmetrics Metric whose value comes at the epoch's end)."""
    if out is None:
        return {}
    if isinstance(out, torch.Tensor):
        return {"loss": out}
    if isinstance(out, Mapping) and all(isinstance(v, torch.Tensor) for v in out.values()):
        return out
    raise UserError(
        "validation_step must return a tensor (the loss), a dict of tensors such as "
        f"{{'loss': per_sample_loss, 'accuracy': correct.float()}}, or log with self.log; it returned "
        f"{type(out).__name__}."
    )


class ScalarLossWarning:
    """Warns once, at the user's training_step, when a padded batch met a scalar loss."""

    def __init__(self, module: Any):
        self.module = module
        self.warned = False

    def check(self, loss: torch.Tensor) -> None:
        if loss.dim() != 0 or self.warned:
            return
        self.warned = True
        step = type(self.module).training_step
        warnings.warn_explicit(
            "training_step returned a scalar loss, and this batch was padded (a ragged last batch is "
            "filled with repeated rows to keep one XLA graph), so the repeated rows count in it. Return "
            "per-sample losses (e.g. reduction='none') for an exact masked mean, or set "
            "trainer.last_batch=drop.", UserWarning, inspect.getsourcefile(step) or "training_step",
            step.__code__.co_firstlineno)
