"""The docker commands pod workers run, parsed by the real docker client (run: `pytest tests/test_docker_argv.py`).

The docker client checks its flags before it contacts a daemon. Pointed at a socket that
does not exist, a well-formed command fails with "Cannot connect to the Docker daemon",
while a bad flag or size fails with "unknown flag" or "invalid argument". So the `docker
pull` and `docker run` a worker would run are checked against docker itself, with no
daemon, and every /dev/shm size `--shm-size` accepts is one docker (and the Docker SDK
that `invoke run` uses) accepts too.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tooling.pod import commands as pc

pytestmark = pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker client on PATH (no daemon)")

IMAGE = "us-docker.pkg.dev/my-proj/trainer/tpu-trainer:2.9"
NO_DAEMON = "Cannot connect to the Docker daemon"


def docker_says(words: list[str], tmp_path: Path) -> str:
    """What the real docker client prints for `words`, with no daemon to reach."""
    assert words[0] == "docker", words
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}  # fmt: skip
    done = subprocess.run(words, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    return done.stdout + done.stderr


def spec(shm_size: str = "16g") -> pc.PodSpec:
    return pc.PodSpec(job="argv-check", args=("--max-epochs", "1"), image=IMAGE, shm_size=shm_size,
                      env=(("XLA_USE_BF16", "1"),), volumes=("/data:/data:ro",))  # fmt: skip


def test_pull_and_run_get_past_dockers_flag_parser(tmp_path: Path) -> None:
    env = pc.worker_env(spec(), 1, 2, ("w0", "w1"))
    for body in (pc.pull_body(spec()), pc.train_body(spec(), env, 1)):
        said = docker_says(shlex.split(body), tmp_path)
        assert NO_DAEMON in said, f"{body}\n{said}"


@pytest.mark.parametrize("size", ["16g", "16G", "16gb", "512m", "1.5g", "0.5g", "65536k", "1073741824b"])
def test_every_shm_size_we_take_docker_takes(size: str, tmp_path: Path) -> None:
    said = docker_says(shlex.split(pc.train_body(spec(size), {}, 0)), tmp_path)
    assert NO_DAEMON in said, said
    # `invoke run` hands the same text to the Docker SDK, which converts it itself.
    from docker.types import HostConfig

    from tooling.docker.container import RunSpec

    run = RunSpec("tpu-trainer:2.9", ("train",), tmp_path, tpu=True, shm_size=size)
    assert HostConfig(version="1.41", shm_size=run.shm_size)["ShmSize"] >= 64 * 2**20


def test_negative_control_docker_refuses_a_bad_size(tmp_path: Path) -> None:
    # Proves the check can fail: our own command with the size replaced by one we refuse.
    words = [("--shm-size=lots" if w == "--shm-size=16g" else w) for w in shlex.split(pc.train_body(spec(), {}, 0))]
    said = docker_says(words, tmp_path)
    assert 'invalid argument "lots" for "--shm-size" flag' in said and NO_DAEMON not in said
