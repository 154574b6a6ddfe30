"""Runtime environment profiles (`env/*.yaml`): which XLA runtime, which variables.

A profile names a runtime (`pjrt` or the legacy `xrt`), how many devices a host has,
and the environment variables to set before torch_xla is imported. Every variable must
be one `trainer.runtime.env_vars` knows. `${devices}` is the device count the run needs;
`${NAME}` is taken from the caller's environment and must be set.
"""
from __future__ import annotations

import os
import string
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Mapping

import yaml

from trainer.runtime import env_vars
from trainer.errors import UserError

RUNTIMES = ("pjrt", "xrt")
_KEYS = {"description", "runtime", "devices_per_host", "env"}
XRT_REMOVED_IN = (2, 1)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    runtime: str
    devices_per_host: int | None
    """Devices one host exposes; None means "discover" (TPU hosts)."""
    env: Mapping[str, str]
    """Unrendered values, e.g. "${devices}"."""

    def render(self, devices: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables to export for a run on `devices` devices."""
        environ = os.environ if environ is None else environ
        values = {"devices": str(devices), **environ}
        rendered = {}
        for key, template in self.env.items():
            try:
                rendered[key] = string.Template(template).substitute(values)
            except KeyError as exc:
                raise UserError(
                    f"profile {self.name!r} needs the environment variable {exc.args[0]} for {key} "
                    f"(template {template!r}), and it is not set. Fix: export {exc.args[0]}=... "
                    "and rerun."
                ) from None
        return rendered


def env_dir() -> Path:
    """`env/` beside the package (a checkout or our image), or `$TPU_TRAINER_ENV_DIR`."""
    override = os.environ.get(env_vars.TPU_TRAINER_ENV_DIR)
    return Path(override) if override else Path(__file__).resolve().parents[2] / "env"


def available_profiles(directory: Path | None = None) -> list[str]:
    directory = directory or env_dir()
    return sorted(p.stem for p in directory.glob("*.yaml") if _is_profile_file(p))


def _is_profile_file(path: Path) -> bool:
    return path.stem != "versions"


def load_profile(name: str, directory: Path | None = None) -> Profile:
    """Read and validate `env/NAME.yaml`; refuse unknown names, keys and variables."""
    directory = directory or env_dir()
    path = directory / f"{name}.yaml"
    known = available_profiles(directory)
    if name not in known:
        raise UserError(
            f"unknown environment profile {name!r}. Profiles in {directory}: {', '.join(known) or 'none'}. "
            "Fix: pass one of them, e.g. `--env-profile cpu` (or `invoke env --profile cpu`)."
        )
    data = yaml.safe_load(path.read_text()) or {}
    where = f"profile {path}"
    unknown = set(data) - _KEYS
    if unknown:
        raise UserError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}. Fix the file.")
    runtime = data.get("runtime")
    if runtime not in RUNTIMES:
        raise UserError(f"{where}: runtime {runtime!r} is not one of {', '.join(RUNTIMES)}. Fix the file.")
    env = {str(k): str(v) for k, v in (data.get("env") or {}).items()}
    bad = sorted(set(env) - env_vars.KNOWN)
    if bad:
        raise UserError(
            f"{where} sets {', '.join(bad)}, which tpu-trainer does not know (a typo would be "
            "silently ignored by XLA). Allowed variables are the ones named in trainer/runtime/env_vars.py: "
            f"{', '.join(sorted(env_vars.KNOWN))}. Fix the name, or add it to trainer/runtime/env_vars.py."
        )
    per_host = data.get("devices_per_host", "auto")
    if per_host != "auto" and not (type(per_host) is int and per_host >= 1):
        raise UserError(f"{where}: devices_per_host must be a positive integer or auto, not {per_host!r}.")
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        runtime=runtime,
        devices_per_host=None if per_host == "auto" else per_host,
        env=env,
    )


def check_runtime_supported(profile: Profile) -> None:
    """XRT profiles only work with torch_xla < 2.1: refuse them with the installed one."""
    if profile.runtime != "xrt":
        return
    try:
        installed = metadata.version("torch-xla")
    except metadata.PackageNotFoundError:
        return
    major_minor = tuple(int(p) for p in installed.split(".")[:2])
    if major_minor >= XRT_REMOVED_IN:
        raise UserError(
            f"profile {profile.name!r} configures the legacy XRT runtime (XRT_TPU_CONFIG), which "
            f"torch_xla removed in 2.1; this environment has torch_xla {installed}, which only "
            "runs PJRT. Fix: use `--env-profile tpu-vm` (PJRT_DEVICE=TPU) on a TPU VM, or run an "
            "image built on a torch_xla release before 2.1 if you need XRT."
        )


def export_lines(variables: Mapping[str, str]) -> str:
    """`export K='V'` lines a POSIX shell can eval."""
    return "\n".join(f"export {k}={_shell_quote(v)}" for k, v in variables.items())


def _shell_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)
