"""What every pod worker runs: its environment and the shell script of each launch phase.

Pure functions from a `PodSpec` to strings, so `--dry-run` prints exactly what would run
and tests can check it without a network. Every phase runs under `supervised`, which
records the job's process group in a pidfile on the worker: closing an ssh connection
does not stop a remote process (and never stops a container), so stopping a worker is an
explicit second command (`stop_script`) that signals that group.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from tooling.errors import ToolingError
from tooling.docker.tpu_flags import DEFAULT_SHM_SIZE, check_shm_size
from tooling.versions import default_image
from trainer.runtime import env_vars

#: Set by the launcher per worker; `--env` may not override them.
RESERVED = frozenset(
    {
        env_vars.TPU_TRAINER_PROCESS_INDEX,
        env_vars.TPU_TRAINER_PROCESS_COUNT,
        env_vars.TPU_TRAINER_IMAGE,
        env_vars.TPU_WORKER_ID,
        env_vars.TPU_WORKER_HOSTNAMES,
    }
)
_JOB = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
#: A setup script travels inside the ssh command line; keep it far below ARG_MAX.
MAX_SETUP_BYTES = 64 * 1024


@dataclass(frozen=True)
class PodSpec:
    """One training job, the same on every worker."""

    job: str
    """Names the pidfiles and containers of this launch on the workers; unique per launch."""
    args: tuple[str, ...] = ()
    """Arguments of `tpu-trainer train`, identical on every worker."""
    image: str | None = field(default_factory=default_image)
    """Image every worker pulls and runs; None runs `entrypoint` installed on the host."""
    entrypoint: str = "tpu-trainer"
    """The engine's CLI on the host (only without an image): `/opt/venv/bin/tpu-trainer` or
    `python3 -m trainer`; non-interactive ssh does not read ~/.bashrc, so give a full path."""
    privileged: bool = True
    """`docker run --privileged`: the simple way to give a container the TPU devices."""
    shm_size: str = DEFAULT_SHM_SIZE
    """`docker run --shm-size`: the container's /dev/shm, for DataLoader worker processes."""
    pull: bool = True
    """Pull the image on every worker first, so all run the registry's copy of the tag."""
    setup: str | None = None
    """Text of a bash script run on every worker before training (code, data, drivers)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra variables for the job; names must be in `trainer.runtime.env_vars.KNOWN`."""
    volumes: tuple[str, ...] = ()
    """`HOST:CONTAINER[:ro]` mounts, so checkpoints outlive the `--rm` container."""
    grace_seconds: int = 10
    """How long a stopped worker gets between SIGTERM and SIGKILL."""

    def __post_init__(self) -> None:
        if not _JOB.fullmatch(self.job):
            raise ToolingError(
                f"Job name {self.job!r} is not allowed: it names files and containers on "
                "the workers, so use 1-63 lowercase letters, digits and '-', starting with "
                "a letter or digit (e.g. --job resnet-run-3), or leave it out to get one."
            )
        for name, _ in self.env:
            if name not in env_vars.KNOWN or name in RESERVED:
                allowed = ", ".join(sorted(env_vars.KNOWN - RESERVED))
                raise ToolingError(
                    f"--env {name}=... is not passed to workers: only variables named in "
                    f"trainer/runtime/env_vars.py may be set, and the launcher sets "
                    f"{', '.join(sorted(RESERVED))} itself. Allowed: {allowed}."
                )
        for volume in self.volumes:
            if ":" not in volume or self.image is None:
                raise ToolingError(
                    f"--volume {volume!r} is not usable: a volume is HOST:CONTAINER[:ro] "
                    "and only applies when running an image (not with --image none)."
                )
        if self.image is not None and self.pull and "/" not in self.image:
            raise ToolingError(
                f"--image {self.image!r} names no registry, so every worker would pull it from "
                "Docker Hub, where it is not. Push it (`invoke push --registry HOST[:PORT]`) "
                "and pass its full name, e.g. --image us-docker.pkg.dev/PROJECT/REPO/"
                f"{self.image}; or, if every worker already has it locally, pass --no-pull."
            )
        if self.setup is not None and len(self.setup.encode()) > MAX_SETUP_BYTES:
            raise ToolingError(
                f"The setup script is {len(self.setup.encode())} bytes; it is sent inside "
                f"the ssh command, which allows at most {MAX_SETUP_BYTES}. Make the script "
                "fetch what it needs (git clone, gsutil cp) instead of embedding it."
            )
        if self.grace_seconds < 1:
            raise ToolingError(f"--grace {self.grace_seconds} must be at least 1 second.")
        check_shm_size(self.shm_size)


def worker_env(
    spec: PodSpec, index: int, count: int, hostnames: tuple[str, ...] | None
) -> dict[str, str]:
    """The environment of worker `index` of `count`.

    `hostnames` is None on Cloud TPU VMs, whose TPU runtime learns the worker id and its
    peers from the metadata server; hosts we manage ourselves get both explicitly.
    """
    env = {
        env_vars.PJRT_DEVICE: "TPU",
        env_vars.TPU_TRAINER_PROCESS_INDEX: str(index),
        env_vars.TPU_TRAINER_PROCESS_COUNT: str(count),
    }
    if hostnames is not None:
        env[env_vars.TPU_WORKER_ID] = str(index)
        env[env_vars.TPU_WORKER_HOSTNAMES] = ",".join(hostnames)
    if spec.image is not None:
        env[env_vars.TPU_TRAINER_IMAGE] = spec.image
    env.update(spec.env)
    return env


def container_name(spec: PodSpec, index: int) -> str:
    return f"tpu-trainer-pod-{spec.job}-w{index}"


#: Where workers keep pidfiles: the login user's own directory, not a shared /tmp where
#: another user could plant a file or symlink under a predictable job name.
PID_DIR = '"$HOME"/.cache/tpu-trainer'


def pidfile(spec: PodSpec, index: int) -> str:
    """The pidfile's path as a shell word (it expands $HOME on the worker)."""
    return f"{PID_DIR}/pod-{spec.job}-w{index}.pid"  # job is [a-z0-9-]: nothing to quote


def _env_words(env: dict[str, str]) -> list[str]:
    return [f"{name}={value}" for name, value in sorted(env.items())]


def setup_body(spec: PodSpec, env: dict[str, str]) -> str:
    assert spec.setup is not None
    return shlex.join(["env", *_env_words(env), "bash", "-c", spec.setup])


def pull_body(spec: PodSpec) -> str:
    """Pull on the worker: only the worker knows whether it can reach the registry."""
    assert spec.image is not None
    return shlex.join(["docker", "pull", spec.image])


def train_body(spec: PodSpec, env: dict[str, str], index: int) -> str:
    if spec.image is None:
        return shlex.join(["env", *_env_words(env), *shlex.split(spec.entrypoint), "train", *spec.args])
    words = ["docker", "run", "--rm", *(["--privileged"] if spec.privileged else []), "--net=host",
             f"--shm-size={spec.shm_size}"]  # fmt: skip
    words += ["--name", container_name(spec, index)]
    for pair in _env_words(env):
        words += ["-e", pair]
    for volume in spec.volumes:
        words += ["-v", volume]
    return shlex.join([*words, spec.image, "train", *spec.args])


def supervised(body: str, pid_word: str) -> str:
    """Run `body` as its own process group and record that group in shell word `pid_word`.

    `set -m` gives the background job its own group (sshd's session or not), so the stop
    command can signal the whole job without touching the wrapper, which stays to report
    the job's exit status (128+N if signal N ended it).
    """
    script = "; ".join(
        [
            f'mkdir -p "$(dirname {pid_word})"',
            "set -m",
            f"( exec {body} ) </dev/null & job=$!",
            "set +m; exec 2>/dev/null",  # no job-status chatter from this wrapper
            f"echo $job > {pid_word}",
            'trap "kill -TERM -- -$job 2>/dev/null" TERM INT HUP',
            "wait $job; rc=$?",
            "while kill -0 $job 2>/dev/null; do wait $job; rc=$?; done",
            f"rm -f {pid_word}",
            "exit $rc",
        ]
    )
    return shlex.join(["bash", "-c", script])


def stop_script(spec: PodSpec, index: int) -> str:
    """Stop worker `index`'s job: container first, then SIGTERM, then SIGKILL after grace.

    The final `docker rm -f` catches a container the daemon created while its `docker run`
    client was being killed (created or started, but no longer attached to anything).
    """
    pid_word = pidfile(spec, index)
    name = shlex.quote(container_name(spec, index))
    docker = spec.image is not None
    lines = [f"[ -f {pid_word} ] || exit 0", f"pg=$(cat {pid_word})"]
    if docker:
        lines.append(f"docker stop -t {spec.grace_seconds} {name} >/dev/null 2>&1")
    lines += [
        "kill -TERM -- -$pg 2>/dev/null",
        f"for _ in $(seq {spec.grace_seconds * 10}); do kill -0 -- -$pg 2>/dev/null || break; sleep 0.1; done",
        "kill -KILL -- -$pg 2>/dev/null",
    ]
    if docker:
        lines.append(f"docker rm -f {name} >/dev/null 2>&1")
    return shlex.join(["bash", "-c", "; ".join([*lines, "exit 0"])])


def run_dir(args: tuple[str, ...]) -> str | None:
    """The training args' `--run-dir` (the last one, as argparse takes it), or None."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--run-dir" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--run-dir="):
            found = arg.partition("=")[2]
    return found


def run_dir_warning(spec: PodSpec, count: int) -> str | None:
    """One paragraph when a multi-worker job would keep its outputs on the workers' own disks.

    TPU pods are usually preemptible: a preempted VM's local disk is gone, and with it every
    checkpoint, so exact resume protects nothing unless the run directory is in Cloud Storage.
    """
    where = run_dir(spec.args)
    if count < 2 or (where is not None and where.startswith("gs://")):
        return None
    given = f"--run-dir {where} is" if where is not None else "No --run-dir was given, so the run writes to runs/"
    return (
        f"warning: {given} on each worker's local disk. On this {count}-worker pod the run's "
        "outputs and checkpoints would live on the workers' own disks and be lost with a "
        "preempted or deleted TPU VM. Pass --run-dir gs://BUCKET/runs/NAME to keep them in "
        "Cloud Storage."
    )
