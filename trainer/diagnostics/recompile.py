"""The recompilation guard: say what changed when XLA compiles again after warm-up.

XLA compiles one executable per distinct graph, and a graph is keyed by its input shapes
and dtypes and by every Python value traced into it. After the first steps, a training
loop should replay the same graph for ever; a compilation later on costs seconds to
minutes on a TPU and usually repeats (a new shape each time). The guard keeps each step's
batch signature (`batch['input_ids']: (8, 128) int64`) and, when a step compiled, names
the key whose shape or dtype changed, or, if no input changed, says that the graph
itself changed (a Python scalar baked in, a data-dependent branch).

Pure Python: the caller passes how many compilations the step caused (a counter diff).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from trainer.errors import UserError

Signature = tuple  # ((key path, shape tuple, dtype name), ...)


def batch_signature(batch: Any, root: str = "batch") -> Signature:
    """Key path -> (shape, dtype) for every tensor in a nested batch; reads no device value."""
    found: list[tuple[str, tuple, str]] = []

    def walk(node: Any, path: str) -> None:
        shape = getattr(node, "shape", None)
        dtype = getattr(node, "dtype", None)
        if shape is not None and dtype is not None:
            found.append((path, tuple(shape), str(dtype).removeprefix("torch.")))
        elif isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{path}[{key!r}]")
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(batch, root)
    return tuple(found)


def describe(entry: tuple[str, tuple, str] | None) -> str:
    return "absent" if entry is None else f"{entry[1]} {entry[2]}"


def signature_changes(old: Signature, new: Signature) -> list[str]:
    """`batch['x']: (8, 128) int64 -> (8, 96) int64` for each key that differs."""
    before, after = {e[0]: e for e in old}, {e[0]: e for e in new}
    return [f"{path}: {describe(before.get(path))} -> {describe(after.get(path))}"
            for path in list(before) + [p for p in after if p not in before]
            if before.get(path) != after.get(path)]


class RecompileGuard:
    """Call `observe(step, signature, compiled)` once per step, after the step's sync.

    The first `warmup_steps` steps may compile (the step graph, then the same step with
    the optimizer's state in it). After that, a compilation returns a warning message,
    or raises `UserError` when `strict`. Steps are optimizer steps: with gradient
    accumulation the batches of one window share a step number (and its warm-up).
    """

    def __init__(self, warmup_steps: int = 3, strict: bool = False):
        self.warmup_steps, self.strict = warmup_steps, strict
        self.previous: Signature | None = None
        self.seen: set[Signature] = set()
        self.events: list[dict] = []
        self._steps = 0
        self._last_step: int | None = None

    def observe(self, step: int, signature: Signature, compiled: int, cause: Sequence[str] = ()) -> str | None:
        if step != self._last_step:
            self._steps, self._last_step = self._steps + 1, step
        previous, self.previous = self.previous, signature
        new_signature = signature not in self.seen
        self.seen.add(signature)
        if not compiled or self._steps <= self.warmup_steps:
            return None
        changes = signature_changes(previous, signature) if previous is not None and new_signature else []
        if changes:
            what = "the batch changed shape or dtype: " + "; ".join(changes)
            fix = ("Fix: give every batch the same shapes (pad sequences to a fixed length or a few "
                   "buckets; keep trainer.last_batch=pad).")
        else:
            what = ("no input changed, so the graph itself changed: a Python number baked into it "
                    "(a learning rate reaching exactly 0.0, a step counter, a shape computed from data) "
                    "or a branch on a tensor's value")
            fix = ("Fix: keep such values as tensors on the device; --debug writes torch_xla's "
                   "compilation causes with the Python line to RUN_DIR/xla_debug.txt.")
        where = f" Compilation cause (torch_xla): {'; '.join(cause)}." if cause else ""
        message = (f"step {step}: XLA compiled {compiled} new graph(s) after warm-up ({self.warmup_steps} steps): "
                   f"{what}.{where} Each new graph costs a compilation (seconds to minutes on a TPU). {fix}")
        self.events.append({"step": step, "compiles": compiled, "changes": changes, "cause": list(cause)})
        if self.strict:
            raise UserError(message + " (--strict-compile makes this an error; drop it to only warn.)")
        return message
