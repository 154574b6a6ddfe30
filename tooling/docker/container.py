"""Run the engine's CLI inside a `tpu-trainer:<pair>` image through the Docker SDK.

A container gets: the invoking user's uid:gid (so the host's run directory receives files
that user owns), the host run root mounted at /work/runs, an explicit allowlist of the
XLA runtime variables set on the host (torchprime's rule: nothing else leaks in), and on a
TPU VM the flags pytorch/xla documents for TPU containers (`tooling.docker.tpu_flags`).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from docker.errors import APIError, ImageNotFound

from tooling.docker.client import connect
from tooling.errors import ToolingError
from tooling.docker.tpu_flags import DEFAULT_SHM_SIZE, check_shm_size
from trainer.runtime import env_vars
from trainer.runtime.tpu_host import has_tpu_devices

RUNS_IN_CONTAINER = "/work/runs"


@dataclass(frozen=True)
class RunSpec:
    """One containerised run of `tpu-trainer ARGS`."""

    image: str
    """Local image reference, e.g. "tpu-trainer:2.9"."""
    args: tuple[str, ...]
    """The CLI arguments, e.g. ("train", "--cores", "8")."""
    run_root: Path
    """Host directory mounted at /work/runs; relative `--run-dir runs/x` lands in it."""
    tpu: bool = False
    """Add the TPU VM flags: privileged (the TPU device files), host network, `shm_size`."""
    name: str | None = None
    user: str | None = None
    """uid:gid inside the container; None means the invoking user's."""
    shm_size: str = DEFAULT_SHM_SIZE
    """Size of the container's /dev/shm on a TPU VM, in docker's spelling (16g, 512m)."""

    def __post_init__(self) -> None:
        check_shm_size(self.shm_size)


def tpu_host(root: str = "/") -> bool:
    """True on a TPU VM: TPU device files are attached (see `trainer.runtime.tpu_host`)."""
    return has_tpu_devices(root)


def run_container(spec: RunSpec, log: Callable[[str], None] = print) -> int:
    """Run `spec` to its end, streaming its output to `log`; return the container's exit code.

    Raises ToolingError if the daemon is unreachable or the image is not local. The
    container is removed afterwards, also on Ctrl-C.
    """
    client = connect()
    try:
        image = client.images.get(spec.image)
    except ImageNotFound:
        raise ToolingError(
            f"Image {spec.image} is not on this machine. Build it with `invoke build --version "
            f"{spec.image.rpartition(':')[2]}` (or pull it from your registry), then run again."
        ) from None
    # Made here, as the invoking user: a missing bind source would be created by root.
    spec.run_root.mkdir(parents=True, exist_ok=True)
    environment = {name: os.environ[name] for name in env_vars.XLA_RUNTIME if name in os.environ}
    # A container cannot see its own image's digest; the run manifest records it from here.
    environment[env_vars.TPU_TRAINER_IMAGE_DIGEST] = (image.attrs.get("RepoDigests") or [image.id])[0]
    try:
        container = client.containers.create(
            spec.image, command=list(spec.args), name=spec.name,
            user=spec.user or f"{os.getuid()}:{os.getgid()}", environment=environment, init=True,
            volumes={str(spec.run_root.resolve()): {"bind": RUNS_IN_CONTAINER, "mode": "rw"}},
            privileged=spec.tpu, network_mode="host" if spec.tpu else None,
            shm_size=spec.shm_size if spec.tpu else None,
        )
    except APIError as err:
        raise ToolingError(f"The Docker daemon refused to create the container: {err.explanation}") from None
    try:
        container.start()
        for chunk in container.logs(stream=True, follow=True):
            log(chunk.decode(errors="replace").rstrip("\n"))
        return int(container.wait()["StatusCode"])
    except KeyboardInterrupt:
        container.stop(timeout=10)
        raise
    finally:
        container.remove(force=True)


def image_reference(pair_key: str, repository: str = "tpu-trainer") -> str:
    return f"{repository}:{pair_key}"


def with_profile(args: Sequence[str], tpu: bool) -> tuple[str, ...]:
    """`args` plus `--env-profile cpu|tpu-vm` for `train` when the user named none."""
    args = tuple(args)
    if args[:1] == ("train",) and not any(a.startswith("--env-profile") for a in args):
        return (*args, "--env-profile", "tpu-vm" if tpu else "cpu")
    return args
