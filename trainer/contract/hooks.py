"""The hooks a fit calls, with Lightning's signatures, order and place, decided once per fit.

    set-up   prepare_data, setup("fit"), configure_model, configure_optimizers,
             on_load_checkpoint(checkpoint) (a resumed run), on_fit_start, the dataloaders,
             on_train_start
    epoch    on_train_epoch_start
    batch    on_train_batch_start(batch, batch_idx), training_step,
             on_before_zero_grad(optimizer) (first batch of a window), on_before_backward(loss),
             on_after_backward, on_before_optimizer_step(optimizer) (last batch of a window),
             on_train_batch_end(outputs, batch, batch_idx)
    validate on_validation_start, on_validation_epoch_start, per batch
             on_validation_batch_start(batch, batch_idx), validation_step,
             on_validation_batch_end(outputs, batch, batch_idx); on_validation_epoch_end,
             on_validation_end
    epoch    on_train_epoch_end, then the epoch's checkpoint with on_save_checkpoint(checkpoint)
    end      on_train_end, on_fit_end, the final checkpoint, teardown("fit")
    test /   (Trainer.test / predict) setup(stage), on_{stage}_start, on_{stage}_epoch_start,
    predict  per batch on_{stage}_batch_start(batch, batch_idx), the step,
             on_{stage}_batch_end(outputs, batch, batch_idx); on_{stage}_epoch_end,
             on_{stage}_end, teardown(stage)

TRACED hooks run while the step's graph is being recorded: a tensor they make joins the
step, and reading one to the host (`.item()`, `print(t)`, `if t > 0`) stalls the host
until the device has run everything so far (`--debug` names that line). HOST hooks run
between graphs, where a read costs one transfer. A hook the module does not override is
never called (no per-step cost), and one defined with another signature is refused.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from trainer.contract.lightning import is_lightning_module, overrides
from trainer.errors import UserError

TRACED, HOST = "traced", "host"

HOOKS: dict[str, tuple[tuple[str, ...], str]] = {  # name -> (Lightning's positional arguments, where it runs)
    "prepare_data": ((), HOST), "setup": (("stage",), HOST), "configure_model": ((), HOST),
    "on_fit_start": ((), HOST), "on_train_start": ((), HOST), "on_train_epoch_start": ((), HOST),
    "on_train_batch_start": (("batch", "batch_idx"), TRACED), "on_before_zero_grad": (("optimizer",), TRACED),
    "on_before_backward": (("loss",), TRACED), "on_after_backward": ((), TRACED),
    "on_before_optimizer_step": (("optimizer",), TRACED),
    "on_train_batch_end": (("outputs", "batch", "batch_idx"), TRACED),
    "on_validation_start": ((), HOST), "on_validation_epoch_start": ((), HOST),
    "on_validation_batch_start": (("batch", "batch_idx"), TRACED),
    "on_validation_batch_end": (("outputs", "batch", "batch_idx"), TRACED),
    "on_validation_epoch_end": ((), HOST), "on_validation_end": ((), HOST), "on_train_epoch_end": ((), HOST),
    "on_train_end": ((), HOST), "on_fit_end": ((), HOST), "teardown": (("stage",), HOST),
    "on_save_checkpoint": (("checkpoint",), HOST), "on_load_checkpoint": (("checkpoint",), HOST),
    **{f"on_{stage}_{when}": ((), HOST) for stage in ("test", "predict") for when in ("start", "epoch_start",
                                                                                     "epoch_end", "end")},
    "on_test_batch_start": (("batch", "batch_idx"), TRACED), "on_predict_batch_start": (("batch", "batch_idx"), TRACED),
    "on_test_batch_end": (("outputs", "batch", "batch_idx"), TRACED),
    "on_predict_batch_end": (("outputs", "batch", "batch_idx"), TRACED),
}

_MOVED = {  # the old TrainModule signatures, and what replaced them
    "on_train_epoch_start": "on_train_epoch_start(self) with no argument: read the epoch as self.current_epoch "
                            "(0-based, as in Lightning)",
    "on_validation_epoch_end": "on_validation_epoch_end(self) with no arguments: read the epoch as "
                               "self.current_epoch (0-based) and the validation averages from "
                               "self.trainer.callback_metrics (e.g. self.trainer.callback_metrics['val_loss'])",
}


class Hooks:
    """The module's overridden hooks as bound methods (None where it keeps the default).

    `enter(name)` names the hook running now: `self.log` reads it for Lightning's per-hook
    defaults (on_step/on_epoch). A LightningModule's own `log` reads it from the module's
    `_current_fx_name`, which Lightning's Trainer sets around every hook; so do we."""

    def __init__(self, module: Any):
        self.module = module
        self.lightning = is_lightning_module(module)
        self.logs: Any = None
        """The fit's `trainer.fit.step_logs.StepLogs` (set by the contract): told the running hook."""
        self.bound: dict[str, Callable | None] = {}
        for name, (args, _) in HOOKS.items():
            fn = getattr(module, name, None) if overrides(module, name) else None
            if fn is not None:
                _check_signature(module, name, fn, args)
            self.bound[name] = fn
        for name, fn in self.bound.items():
            setattr(self, name, fn)  # the loop tests `hooks.on_before_backward` for None: one attribute read

    def enter(self, name: str) -> None:
        """`name` (a hook or a step) runs now; what it logs gets its defaults."""
        self.logs.current = name
        if self.lightning:
            self.module._current_fx_name = name

    def call(self, name: str, *args: Any) -> Any:
        """Run an overridden hook as `name` (nothing when the module keeps the default)."""
        fn = self.bound[name]
        return None if fn is None else self.run_as(name, fn, *args)

    def run_as(self, name: str, fn: Callable, *args: Any) -> Any:
        """Run one of the module's own methods (configure_optimizers, ...) as `name`, like a hook."""
        previous = self.logs.current
        self.enter(name)
        try:
            return fn(*args)
        finally:
            self.enter(previous)

    def leave(self) -> None:
        """The fit is over: the module reads back as it was (no running hook)."""
        if self.lightning:
            self.module._current_fx_name = None


def _check_signature(module: Any, name: str, fn: Callable, args: tuple[str, ...]) -> None:
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        pass
    except ValueError:  # a builtin without a signature: cannot be checked
        return
    else:
        return
    kind = type(module).__name__
    expected = f"{name}(self{''.join(', ' + a for a in args)})"
    changed = _MOVED.get(name)
    if changed:
        raise UserError(
            f"{kind}.{name}{inspect.signature(fn)} has the old TrainModule signature. TrainModule hooks now take "
            f"Lightning's signatures: define {changed}.")
    raise UserError(
        f"{kind}.{name}{inspect.signature(fn)} does not take Lightning's arguments: the engine calls "
        f"{expected}, as Lightning does. Fix: define {expected}.")
