"""The XLA runtime: host discovery, profile choice, preflight, then torch_xla start-up.

Everything before `start_xla` imports no torch: a wrong DEVICES, profile or version pair
is refused in milliseconds with the fix, instead of after torch_xla's 4 s import or,
worse, after torch_xla silently fell back to the CPU.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Mapping

import yaml

from trainer.runtime import env_vars
from trainer.runtime.devices import DeviceSelection, select_devices
from trainer.errors import UserError
from trainer.parallel.mesh import DATA_PARALLEL, ParallelPlan, plan_parallel
from trainer.runtime.profiles import Profile, check_runtime_supported, env_dir, load_profile
from trainer.settings import Spelling
from trainer.runtime.tpu_host import default_profile_name, tpu_host_devices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimePlan:
    """What the run will use, decided before torch_xla is imported."""

    profile: Profile
    host_devices: int
    selection: DeviceSelection
    env: Mapping[str, str]
    """The variables the profile set for this run (recorded in the run manifest)."""
    parallel: ParallelPlan
    """The mesh and strategy (trainer.parallel)."""
    spelling: Spelling = Spelling("make")
    """How the user spelled the options, for later errors."""


def check_version_pair() -> tuple[str, str]:
    """torch and torch_xla must share major.minor; torch-xla's metadata does not enforce it."""
    try:
        torch_version = metadata.version("torch")
        xla_version = metadata.version("torch-xla")
    except metadata.PackageNotFoundError as exc:
        raise UserError(
            f"{exc.args[0]} is not installed in this Python ({sys.executable}). tpu-trainer needs a "
            "matched torch/torch_xla pair. Fix: run `make train` (it creates .venv with the pinned "
            f"pair), or `pip install -c env/constraints-{default_pair()}.txt torch torch-xla`."
        ) from None

    def release(version: str) -> tuple[int, int]:
        return tuple(int(p) for p in re.findall(r"\d+", version)[:2])  # type: ignore[return-value]

    if release(torch_version) != release(xla_version):
        wanted = ".".join(map(str, release(xla_version)))
        raise UserError(
            f"torch {torch_version} and torch_xla {xla_version} are not a matched pair: torch_xla "
            f"{xla_version} is built against torch {wanted}.x, and importing it with another torch "
            "fails with an 'undefined symbol' error. Fix: `pip install torch=="
            f"{wanted}.0` next to torch_xla {xla_version} (or use the exact pins in "
            "env/constraints-*.txt, as `make train` does)."
        )
    return torch_version, xla_version


def default_pair() -> str:
    """The pair `make` installs by default: `default` in env/versions.yaml (its one home)."""
    try:
        return str(yaml.safe_load((env_dir() / "versions.yaml").read_text())["default"])
    except (OSError, KeyError, TypeError):
        return "<pair>"  # an install without env/: the message still names the file pattern


def plan_runtime(devices: Any, profile_name: str = "auto", strategy: str = DATA_PARALLEL, mesh: Any = "",
                              spelling: Spelling = Spelling("make")) -> RuntimePlan:
    """Choose the profile, count the host's devices, validate devices, strategy and mesh.

    No torch imported. Errors quote the options in `spelling` (how the user wrote them).
    """
    if profile_name == "auto":
        profile_name, why = default_profile_name()
        log.info("environment profile: %s (%s; override with --env-profile)", profile_name, why)
    profile = load_profile(profile_name)
    check_runtime_supported(profile)
    host_devices = profile.devices_per_host or tpu_host_devices()
    if host_devices == 0:
        raise UserError(
            f"profile {profile.name!r} targets a TPU, but this host has no TPU devices "
            "(no /dev/accel*, no /dev/vfio/*, no TPU_ACCELERATOR_TYPE). torch_xla would fall back "
            "to the CPU without saying so (\"Missing XLA configuration\"). Fix: on a TPU VM, check "
            "that no other process holds the TPU (`invoke tpu-clean`); elsewhere use `--env-profile cpu`."
        )
    selection = select_devices(devices, host_devices, spelling)
    parallel = plan_parallel(strategy, mesh, selection.count, spelling)
    if strategy != DATA_PARALLEL and not selection.spmd:
        log.warning("%s on one device: there is nothing to shard over, so the model trains unsharded. Use "
                    "every device of the host (%s) to shard it.", spelling.assign("strategy", strategy),
                    spelling.example("devices", "auto"))
    env = profile.render(devices=max(selection.devices_needed, selection.count))
    return RuntimePlan(profile=profile, host_devices=host_devices, selection=selection, env=env, parallel=parallel,
                       spelling=spelling)


def apply_environment(plan: RuntimePlan, extra: Mapping[str, str] | None = None) -> None:
    """Export the profile's variables and `extra` (before torch_xla reads them); say what we override."""
    late = []
    for key, value in {**plan.env, **(extra or {})}.items():
        current = os.environ.get(key)
        if current is not None and current != value:
            log.warning("profile %s sets %s=%s (it was %s)", plan.profile.name, key, value, current)
        if current != value and "torch_xla" in sys.modules:
            late.append(f"{key}={value}")
        os.environ[key] = value
    if late:
        log.warning("torch_xla was imported before the engine set %s; variables XLA reads at import may not "
                    "apply. Fix: import torch_xla after creating the Trainer, or export them first "
                    "(eval \"$(tpu-trainer env --profile %s)\").", ", ".join(late), plan.profile.name)


@dataclass
class XlaRuntime:
    """torch_xla, started for one run."""

    device: Any
    mesh: Any | None
    """The SPMD mesh over every device (trainer.parallel), or None on one device."""
    process_index: int
    process_count: int
    torch_version: str
    xla_version: str

    @property
    def is_global_zero(self) -> bool:
        """The process that writes shared outputs (logs, checkpoints manifest)."""
        return self.process_index == 0


def start_xla(plan: RuntimePlan) -> XlaRuntime:
    """Preflight, import torch_xla, enable SPMD when several devices, verify the devices exist."""
    torch_version, xla_version = check_version_pair()
    check_tpu_runtime(plan)
    import torch_xla
    import torch_xla.runtime as xr

    mesh = None
    if plan.selection.spmd:
        xr.use_spmd()  # must precede any tensor on the device
    available = xr.global_runtime_device_count()
    if plan.selection.spmd and available != plan.selection.count * xr.process_count():
        raise UserError(
            f"{plan.spelling.assign('devices', plan.selection.count)} needs {plan.selection.count} devices per "
            f"host, but the XLA runtime reports {available} in all for {xr.process_count()} host(s). Fix: "
            f"`{plan.spelling.example('devices', 1)}` or `{plan.spelling.example('devices', 'auto')}` (all of "
            "this host's devices)."
        )
    if plan.selection.spmd:
        from trainer.parallel.sharding import build_mesh

        mesh = build_mesh(plan.parallel.mesh, available)
        device = torch_xla.device()
    else:
        index = plan.selection.index or 0
        if index >= available:
            raise UserError(
                f"device {index} does not exist: the XLA runtime has {available} device(s) here. Fix: "
                f"`{plan.spelling.example('devices', [0])}` to `{plan.spelling.example('devices', [available - 1])}`.")
        device = torch_xla.device(index)
    check_launcher_topology(xr.process_index(), xr.process_count())
    return XlaRuntime(
        device=device,
        mesh=mesh,
        process_index=xr.process_index(),
        process_count=xr.process_count(),
        torch_version=torch_version,
        xla_version=xla_version,
    )


def check_launcher_topology(index: int, count: int, environ: Mapping[str, str] = os.environ) -> None:
    """`invoke pod` tells each worker its index and the worker count; XLA must agree.

    A disagreement means a host list in the wrong order or a worker missing from the
    slice: the data shards would overlap or leave gaps, so refuse instead of training.
    """
    expected = (environ.get(env_vars.TPU_TRAINER_PROCESS_INDEX), environ.get(env_vars.TPU_TRAINER_PROCESS_COUNT))
    if expected == (None, None) or expected == (str(index), str(count)):
        return
    raise UserError(
        f"the launcher started this worker as process {expected[0]} of {expected[1]} "
        f"({env_vars.TPU_TRAINER_PROCESS_INDEX}/{env_vars.TPU_TRAINER_PROCESS_COUNT}), but the XLA "
        f"runtime says it is process {index} of {count}. Fix: list the hosts in worker order "
        "(worker 0 first) and include every worker of the slice, or unset those variables."
    )


def check_tpu_runtime(plan: RuntimePlan) -> None:
    """A TPU target needs libtpu; without it torch_xla would fail obscurely or use the CPU."""
    if plan.env.get(env_vars.PJRT_DEVICE) != "TPU":
        return
    import importlib.util

    if importlib.util.find_spec("libtpu") is None and not os.environ.get("TPU_LIBRARY_PATH"):
        raise UserError(
            "the run targets a TPU (PJRT_DEVICE=TPU) but libtpu is not installed in this Python. "
            "Fix: `pip install torch-xla[tpu]==<your torch_xla version>` (it pins the matching "
            "libtpu), or use our image, which has it."
        )
