"""Which XLA devices a run uses, decided before torch_xla is imported.

`CORES` accepts what Lightning's `devices=` accepts on TPUs: `1`, the host's full device
count, `auto` (the full count), or one device index as a list, e.g. `[5]`. Several
devices always means data parallelism over all of them with SPMD (one process, one
graph, batch sharded on a `data` axis); a subset of several devices is not offered.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from trainer.errors import UserError


@dataclass(frozen=True)
class DeviceSelection:
    """The devices of this host a run trains on."""

    count: int
    """How many devices take part: 1, or every device of the host."""
    index: int | None = None
    """The one device to use when the user named it (`CORES=[5]`); None means device 0 or all."""

    @property
    def spmd(self) -> bool:
        """Several devices: the batch is sharded over a device mesh in one process."""
        return self.count > 1

    @property
    def devices_needed(self) -> int:
        """How many devices the runtime must expose for this selection to exist."""
        return self.index + 1 if self.index is not None else self.count

    def describe(self) -> str:
        if self.index is not None:
            return f"device {self.index} only"
        return f"{self.count} device" + ("s (SPMD data parallel)" if self.count > 1 else "")


def allowed_values(host_devices: int) -> str:
    """The accepted spellings for this host, for error messages and `--help`."""
    counts = "1" if host_devices == 1 else f"1, {host_devices}"
    return f"{counts}, auto, or one device index as a list, [0] to [{host_devices - 1}]"


def select_devices(raw: object, host_devices: int, source: str = "CORES") -> DeviceSelection:
    """Parse `raw` (CLI string, YAML int or list) against a host with `host_devices` devices.

    Raises UserError naming `source`, the value given and the values allowed here.
    """
    value = raw
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() == "auto":
            return DeviceSelection(count=host_devices)
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
    if isinstance(value, (list, tuple)):
        if len(value) == 1 and type(value[0]) is int and 0 <= value[0] < host_devices:
            return DeviceSelection(count=1, index=value[0])
        problem = (
            "a list must hold exactly one device index"
            if len(value) != 1
            else f"device {value[0]!r} does not exist on this host"
        )
        raise _bad(raw, host_devices, source, problem)
    if type(value) is int and value in (1, host_devices):
        return DeviceSelection(count=value)
    raise _bad(raw, host_devices, source, "it is not a device count this host has")


def _bad(raw: object, host_devices: int, source: str, problem: str) -> UserError:
    return UserError(
        f"{source}={raw!r} is not a valid device selection: {problem}. This host has "
        f"{host_devices} XLA device{'s' if host_devices != 1 else ''}, so {source} accepts "
        f"{allowed_values(host_devices)}. Several devices always train data-parallel over the "
        f"whole host (SPMD). Fix: e.g. `make train CORES={host_devices}` for all devices, "
        f"`CORES=1` for one, or `CORES=[{host_devices - 1}]` for one specific device."
    )
