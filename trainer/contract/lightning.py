"""Recognising Lightning's classes without importing Lightning, and refusing what we do not run.

Lightning is a test dependency only: a `LightningModule` is recognised by the names of
the classes in its MRO, so the engine imports nothing of it. Everything of Lightning's
module contract that the engine does not run is refused here, before any XLA work, with
one paragraph naming it; silently skipping a user's `optimizer_step` would train
something else than the user wrote.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from trainer.errors import UserError

_PACKAGES = ("lightning.pytorch.", "pytorch_lightning.")
_MODULE_CLASSES = {p + "core.module.LightningModule" for p in _PACKAGES}
_DATAMODULE_CLASSES = {p + "core.datamodule.LightningDataModule" for p in _PACKAGES}
_METRIC_CLASSES = {"torchmetrics.metric.Metric"}
_CORE = tuple(p + "core." for p in _PACKAGES) + ("lightning.fabric.", "lightning_fabric.", "torch.", "trainer.module.")

# Overriding any of these changes how a step is run; the engine runs one fixed, compiled step.
_REFUSED_OVERRIDES = {
    "optimizer_step": "the engine steps the one optimizer itself, inside the compiled step (put per-step "
                      "work in on_before_optimizer_step)",
    "optimizer_zero_grad": "the engine frees the gradients right after the optimizer step",
    "lr_scheduler_step": "the engine steps the scheduler per its 'interval' ('step' or 'epoch'); a custom "
                         "scheduler step is not run",
    "backward": "the engine calls loss.backward() (use on_before_backward / on_after_backward)",
    "configure_gradient_clipping": "use Trainer(gradient_clip_val=...) (global-norm clipping)",
    "clip_gradients": "use Trainer(gradient_clip_val=...) (global-norm clipping)",
    "configure_sharded_model": "renamed configure_model in Lightning 2",
    "transfer_batch_to_device": "the engine moves batches (fixed shapes, sharded over the mesh); shape the "
                                "batch in the DataLoader's collate_fn",
    "on_before_batch_transfer": "shape the batch in the DataLoader's collate_fn",
    "on_after_batch_transfer": "shape the batch in the DataLoader's collate_fn, or at the top of training_step",
    "on_validation_model_eval": "the engine calls module.eval() itself (use on_validation_epoch_start)",
    "on_validation_model_train": "the engine calls module.train() itself (use on_validation_epoch_end)",
    "on_validation_model_zero_grad": "validation runs under torch.no_grad",
    "configure_callbacks": "callbacks from the module are not run; pass them to Trainer(callbacks=[...])",
}
# Calls in the module's source that only make sense with manual optimization.
_REFUSED_CALLS = {
    "manual_backward": "manual optimization",
    "toggle_optimizer": "toggle_optimizer (several optimizers, manual optimization)",
    "untoggle_optimizer": "untoggle_optimizer (several optimizers, manual optimization)",
    "toggled_optimizer": "toggled_optimizer (several optimizers, manual optimization)",
}


def _mro_names(obj: Any) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}


def is_lightning_module(obj: Any) -> bool:
    """A `lightning.pytorch` or `pytorch_lightning` LightningModule (either package's)."""
    return bool(_mro_names(obj) & _MODULE_CLASSES)


def is_datamodule(obj: Any) -> bool:
    return bool(_mro_names(obj) & _DATAMODULE_CLASSES)


def is_metric(obj: Any) -> bool:
    """A torchmetrics `Metric` (logged by object: computed at the epoch's end)."""
    return bool(_mro_names(obj) & _METRIC_CLASSES)


def is_framework_class(cls: type) -> bool:
    """A class of Lightning, torch or our own TrainModule: its methods are defaults, not the user's."""
    name = cls.__module__ + "."  # Lightning's demo modules (lightning.pytorch.demos) count as user code
    return name.startswith(_CORE) or cls is object


def overrides(module: Any, name: str) -> bool:
    """The user's class (not Lightning's, torch's or TrainModule's) defines `name`."""
    for cls in type(module).__mro__:
        if name in cls.__dict__:
            return not is_framework_class(cls)
    return False


def check_supported(module: Any) -> None:
    """UserError for every piece of Lightning's contract the engine does not run (before XLA work)."""
    kind = type(module).__name__
    if getattr(module, "automatic_optimization", True) is False:
        raise UserError(
            f"{kind} sets automatic_optimization = False (manual optimization), which tpu-trainer does not "
            "support: the engine runs backward, clipping and one optimizer step inside one compiled XLA step. "
            "Fix: return the loss from training_step and let the engine optimize (remove automatic_optimization "
            "= False and the manual_backward / optimizer.step() calls)."
        )
    for name, why in _REFUSED_OVERRIDES.items():
        if overrides(module, name):
            raise UserError(f"{kind} overrides {name}(), which tpu-trainer does not run: {why}. Fix: remove "
                            f"{kind}.{name}.")
    called = _calls_on_self(module)
    for call, what in _REFUSED_CALLS.items():
        if call in called:
            raise UserError(
                f"{kind} calls self.{call}(...): {what} is not supported by tpu-trainer (one optimizer, automatic "
                f"optimization in one compiled step). Fix: return the loss from training_step and remove the "
                f"{call} calls.")
    step = getattr(type(module), "training_step", None)
    if step is not None and "dataloader_iter" in inspect.signature(step).parameters:
        raise UserError(
            f"{kind}.training_step takes dataloader_iter: tpu-trainer hands training_step one batch at a time "
            "(copied to the device ahead of the step). Fix: define training_step(self, batch, batch_idx).")
    for name in ("validation_step", "on_validation_batch_start", "on_validation_batch_end"):
        fn = getattr(type(module), name, None)
        if fn is not None and overrides(module, name):
            params = inspect.signature(fn).parameters
            if "dataloader_idx" in params and params["dataloader_idx"].default is inspect.Parameter.empty:
                raise UserError(
                    f"{kind}.{name} requires dataloader_idx (several validation DataLoaders), which tpu-trainer "
                    f"does not support: it validates on one loader. Fix: give dataloader_idx a default "
                    f"(dataloader_idx=0) and return one DataLoader from val_dataloader().")


def check_optimizers(returned: Any, kind: str) -> None:
    """configure_optimizers' result names one optimizer (UserError for several)."""
    import torch

    def count(value: Any) -> int:
        if isinstance(value, torch.optim.Optimizer):
            return 1
        if isinstance(value, dict):
            return count(value.get("optimizer"))
        if isinstance(value, (list, tuple)):
            return sum(count(v) for v in value)
        return 0

    found = count(returned)
    if found > 1:
        raise UserError(
            f"{kind}.configure_optimizers() returned {found} optimizers; tpu-trainer trains with one (several "
            "optimizers need manual optimization, which it does not support). Fix: return one optimizer, e.g. "
            "with parameter groups for the parts that need other settings.")


def _calls_on_self(module: Any) -> set[str]:
    """Names of the methods the user's classes call as `self.NAME(...)` (read from their source)."""
    names: set[str] = set()
    for cls in type(module).__mro__:
        if is_framework_class(cls):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):  # defined in a REPL or a notebook cell that is gone
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                names.add(node.func.attr)
    return names
