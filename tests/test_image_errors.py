"""Bad input to the image tasks: one paragraph naming the fix, non-zero exit, nothing left behind.

Run: `.venv/bin/pytest tests/test_image_errors.py` (the `docker`-marked test needs a daemon:
`make test-image`).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
INVOKE = [sys.executable, "-m", "invoke"]


def invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*INVOKE, *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def assert_one_paragraph(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr.strip()
    assert "Traceback" not in done.stderr
    assert "\n\n" not in message and len(message.splitlines()) == 1, message
    for needle in needles:
        assert needle in message, message


@pytest.mark.parametrize("task", [["build"], ["push", "--registry", "127.0.0.1:1"], ["run"]])
def test_version_not_in_versions_yaml(task):
    done = invoke(*task, "--version", "9.9")
    assert_one_paragraph(done, "'9.9'", "env/versions.yaml", "2.8, 2.9")


@pytest.mark.parametrize("task", [["build"], ["run", "--", "train"], ["base-image", "--tag", "x:y"]])
def test_no_docker_daemon(task, tmp_path):
    socket = tmp_path / "no-daemon.sock"
    done = invoke(*task, env={"DOCKER_HOST": f"unix://{socket}"})
    assert_one_paragraph(done, f"unix://{socket}", "ci/start-dockerd.sh")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.docker
def test_run_with_missing_local_image_leaves_nothing(tmp_path):
    import docker

    from tooling.docker.container import RunSpec, run_container
    from tooling.errors import ToolingError

    client = docker.from_env()

    def leftovers():  # other sessions may share the daemon: look only at what this run could make
        return [c.id for c in client.containers.list(all=True) if c.attrs["Config"]["Image"] == "tpu-trainer:0.0-missing"]

    with pytest.raises(ToolingError) as err:
        run_container(RunSpec("tpu-trainer:0.0-missing", ("train",), tmp_path / "runs"))
    assert "not on this machine" in str(err.value) and "invoke build --version 0.0-missing" in str(err.value)
    assert leftovers() == []
    assert not (tmp_path / "runs").exists()
    assert client.images.list(name="tpu-trainer:0.0-missing") == []
