"""The device mesh: its axes, their sizes, and which of them the batch is split over.

The one place an axis is named. Axes follow torchprime's `ici_mesh` and torch_xla's
FSDPv2 convention:
- `data`: replicas; each holds every parameter it trains, and takes its slice of the batch.
- `fsdp`: parameters, gradients and optimizer state are sharded along it (FSDP over SPMD);
  each device also takes its slice of the batch.
So the batch is split over every axis, and the mesh always has both (size 1 when unused:
one graph shape for every strategy). Imports no torch: a bad MESH is refused in
milliseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from trainer.errors import UserError
from trainer.settings import Spelling

DATA, FSDP = "data", "fsdp"
AXES = (DATA, FSDP)
"""Mesh axes, outermost first (neighbouring devices share the inner axis: fsdp traffic is heaviest)."""
BATCH_AXES = AXES
"""The axes a batch's first dimension is split over."""

DATA_PARALLEL, FULLY_SHARDED = "data", "fsdp"
STRATEGIES = {
    DATA_PARALLEL: "every device holds the whole model; the batch is split (default)",
    FULLY_SHARDED: "parameters, gradients and optimizer state sharded over the fsdp axis (FSDP over SPMD)",
}


@dataclass(frozen=True)
class MeshShape:
    """Axis sizes of the device mesh, in `AXES` order."""

    sizes: tuple[int, ...]

    @property
    def devices(self) -> int:
        return math.prod(self.sizes)

    def size(self, axis: str) -> int:
        return self.sizes[AXES.index(axis)]

    @property
    def shards_parameters(self) -> bool:
        return self.size(FSDP) > 1

    def describe(self) -> str:
        return ",".join(f"{axis}:{size}" for axis, size in zip(AXES, self.sizes))


@dataclass(frozen=True)
class ParallelPlan:
    """How a run spreads its model and batch, decided before torch_xla starts."""

    strategy: str
    mesh: MeshShape | None
    """None on one device (no SPMD)."""

    @property
    def fully_sharded(self) -> bool:
        return self.strategy == FULLY_SHARDED and self.mesh is not None

    def describe(self) -> str:
        return f"mesh {self.mesh.describe()}" if self.mesh is not None else "no mesh"


def parse_mesh(raw: Any, spelling: Spelling) -> dict[str, int]:
    """`"data:2,fsdp:4"` (CLI, make) or `{data: 2, fsdp: 4}` (YAML, Python) -> {axis: size}."""
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, Mapping):
        pairs = list(raw.items())
    elif isinstance(raw, str):
        pairs = [item.partition(":")[::2] for item in raw.replace(" ", "").split(",") if item]
    else:
        raise _bad_mesh(raw, spelling, f"it is a {type(raw).__name__}")
    sizes: dict[str, int] = {}
    for axis, size in pairs:
        if axis not in AXES:
            raise _bad_mesh(raw, spelling, f"{axis!r} is not a mesh axis")
        try:
            number = int(size)
        except (TypeError, ValueError):
            number = 0
        if number < 1 or str(size).strip() != str(number):
            raise _bad_mesh(raw, spelling, f"the size of {axis!r} must be a positive integer, not {size!r}")
        if axis in sizes:
            raise _bad_mesh(raw, spelling, f"{axis!r} is given twice")
        sizes[axis] = number
    return sizes


def plan_parallel(strategy: str, mesh: Any, devices: int, spelling: Spelling) -> ParallelPlan:
    """Validate strategy and mesh against the device count; raises UserError in the user's spelling."""
    if strategy not in STRATEGIES:
        allowed = "; ".join(f"{name} ({what})" for name, what in STRATEGIES.items())
        raise UserError(
            f"{spelling.assign('strategy', strategy)} is not a strategy tpu-trainer knows. Allowed: {allowed}. "
            f"Fix: e.g. `{spelling.example('strategy', FULLY_SHARDED)}` to shard a model that does not fit on one device."
        )
    sizes = parse_mesh(mesh, spelling)
    if devices == 1:
        if sizes and math.prod(sizes.values()) != 1:
            raise UserError(
                f"{spelling.assign('mesh', mesh)} needs {math.prod(sizes.values())} devices, but the run uses one. "
                f"Fix: use every device of the host ({spelling.example('devices', 'auto')}), or drop the mesh."
            )
        return ParallelPlan(strategy, None)
    if not sizes:  # one axis over every device: the strategy's own
        sizes = {DATA: devices} if strategy == DATA_PARALLEL else {FSDP: devices}
    shape = MeshShape(tuple(sizes.get(axis, 1) for axis in AXES))
    if shape.devices != devices:
        raise UserError(
            f"{spelling.assign('mesh', mesh)} has {shape.devices} devices (the product of its axis sizes), "
            f"but the run uses {devices}. Fix: make the sizes multiply to {devices}, e.g. "
            f"`{spelling.example('mesh', f'{DATA}:2,{FSDP}:{devices // 2}')}`."
        )
    if shape.shards_parameters and strategy != FULLY_SHARDED:
        raise UserError(
            f"{spelling.assign('mesh', mesh)} has an fsdp axis of size {shape.size(FSDP)}, but the strategy is "
            f"{strategy!r}, which never shards parameters. Fix: add `{spelling.assign('strategy', FULLY_SHARDED)}`, "
            f"or put every device on the data axis."
        )
    return ParallelPlan(strategy, shape)


def _bad_mesh(raw: Any, spelling: Spelling, problem: str) -> UserError:
    return UserError(
        f"{spelling.assign('mesh', raw)} is not a device mesh: {problem}. A mesh names axis sizes from "
        f"{', '.join(AXES)}, e.g. `{DATA}:2,{FSDP}:4` (YAML: {{{DATA}: 2, {FSDP}: 4}}); their product is the "
        f"device count. Fix: e.g. `{spelling.example('mesh', f'{DATA}:2,{FSDP}:4')}`."
    )
