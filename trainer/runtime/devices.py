"""Which XLA devices a run uses, decided before torch_xla is imported.

`devices` (CLI `--devices`, alias `--cores`; make `DEVICES`, alias `CORES`) accepts what
Lightning's `devices=` accepts on TPUs: `1`, the host's full device count, `auto` (the full
count), or one device index as a list, e.g. `[5]`. Several devices always means one SPMD
program over all of them (how the model and batch are spread is `trainer.parallel`'s
business); a subset of several devices is not offered. The raw value is parsed once, here,
into a `DeviceSelection`, for `train` and `env` alike; errors quote it in the user's own
spelling (`trainer.settings.Spelling`).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from trainer.errors import UserError
from trainer.settings import Spelling


@dataclass(frozen=True)
class DeviceSelection:
    """The devices of this host a run trains on."""

    count: int
    """How many devices take part: 1, or every device of the host."""
    index: int | None = None
    """The one device to use when the user named it (`DEVICES=[5]`); None means device 0 or all."""

    @property
    def spmd(self) -> bool:
        """Several devices: one program over a device mesh in one process."""
        return self.count > 1

    @property
    def devices_needed(self) -> int:
        """How many devices the runtime must expose for this selection to exist."""
        return self.index + 1 if self.index is not None else self.count

    def describe(self, sharded: bool = False) -> str:
        if self.index is not None:
            return f"device {self.index} only"
        if self.count == 1:
            return "1 device"
        return f"{self.count} devices (SPMD {'FSDP' if sharded else 'data parallel'})"


def allowed_values(host_devices: int) -> str:
    """The accepted values for this host, for error messages and `--help`."""
    counts = "1" if host_devices == 1 else f"1, {host_devices}"
    return f"{counts}, auto, or one device index as a list, [0] to [{host_devices - 1}]"


_MAKE = Spelling("make", {"devices": "CORES"})  # the first front end's spelling, kept as the default


def select_devices(raw: object, host_devices: int, spelling: Spelling = _MAKE) -> DeviceSelection:
    """Parse `raw` (a CLI string, a YAML or Python int or list) against this host.

    Raises UserError quoting `raw` as the user spelled it and the values allowed here.
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
        raise _bad(raw, host_devices, spelling, problem)
    if type(value) is int and value in (1, host_devices):
        return DeviceSelection(count=value)
    raise _bad(raw, host_devices, spelling, "it is not a device count this host has")


def _bad(raw: object, host_devices: int, spelling: Spelling, problem: str) -> UserError:
    return UserError(
        f"{spelling.assign('devices', raw)} is not a valid device selection: {problem}. This host has "
        f"{host_devices} XLA device{'s' if host_devices != 1 else ''}, so {spelling.name('devices')} "
        f"accepts {allowed_values(host_devices)}. Several devices always run one SPMD program over "
        f"the whole host. Fix: e.g. `{spelling.example('devices', host_devices)}` for all devices, "
        f"`{spelling.example('devices', 1)}` for one, or `{spelling.example('devices', [host_devices - 1])}` "
        "for one specific device."
    )
