"""Pushing to a real registry (Debian's docker-registry, htpasswd auth, on 127.0.0.1 only).

Run: `make test-image` (needs a Docker daemon and `docker-registry` + `htpasswd` installed:
`ci/start-dockerd.sh` installs both).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from image_fixtures import base_image, client, image, pair  # noqa: F401

from tooling.errors import ToolingError
from tooling.docker.registry import push_image

pytestmark = pytest.mark.docker
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Registry:
    address: str
    username: str
    password: str

    @property
    def auth(self) -> dict:
        return {"username": self.username, "password": self.password}

    def manifest_digest(self, repository: str, tag: str) -> str:
        """Ask the registry itself (HTTP API v2) which manifest digest `tag` names."""
        request = urllib.request.Request(
            f"http://{self.address}/v2/{repository}/manifests/{tag}", method="HEAD",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json",
                     "Authorization": "Basic " + base64.b64encode(
                         f"{self.username}:{self.password}".encode()).decode()})
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.headers["Docker-Content-Digest"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    port, user, password = free_port(), "trainer", uuid.uuid4().hex
    htpasswd = subprocess.run(["htpasswd", "-Bbn", user, password], capture_output=True,
                              text=True, check=True).stdout
    (tmp_path / "htpasswd").write_text(htpasswd)
    config = tmp_path / "config.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"},
        "auth": {"htpasswd": {"realm": "tpu-trainer-test", "path": str(tmp_path / "htpasswd")}},
    }))
    log = (tmp_path / "registry.log").open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            except urllib.error.HTTPError as err:
                if err.code == 401:  # up, and demanding credentials as configured
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "registry.log").read_text()
            time.sleep(0.2)
        yield Registry(f"127.0.0.1:{port}", user, password)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)  # gigabytes; pytest keeps tmp dirs


@pytest.fixture
def small_image(client, base_image):
    """A fresh, small image of our own (one empty layer on the base), removed afterwards."""
    container = client.containers.create(base_image, ["true"])
    tag = uuid.uuid4().hex[:8]
    try:
        made = container.commit("tpu-trainer-regtest", tag)
    finally:
        container.remove()
    yield made, (f"tpu-trainer-regtest:{tag}",)
    for found in client.images.list(name="tpu-trainer-regtest") + client.images.list(name="*/tpu-trainer-regtest"):
        if found.id == made.id:
            client.images.remove(found.id, force=True)


def test_push_then_pull_back_by_digest_from_an_emptied_cache(client, registry, small_image):
    made, tags = small_image
    pushed = push_image(tags, registry.address, registry.auth)
    assert len(pushed) == 1
    repository, tag = tags[0].split(":")
    assert registry.manifest_digest(repository, tag) == pushed[0].digest
    # Forget the image locally, then get it back from the registry by digest alone.
    client.images.remove(made.id, force=True)
    again = client.images.pull(f"{registry.address}/{repository}@{pushed[0].digest}", auth_config=registry.auth)
    assert again.id == made.id


def test_invoke_push_sends_both_tags_of_the_training_image(client, registry, image, pair):
    env = {**os.environ, "REGISTRY_PASSWORD": registry.password}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "invoke", "push", "--registry", registry.address,
                           "--username", registry.username], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1200)
    print(f"invoke push of {image.tags}: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    pushed_tags = [t for t in image.tags if t.startswith("tpu-trainer:")]
    for local in pushed_tags:
        repository, tag = local.split(":")
        digest = registry.manifest_digest(repository, tag)
        assert f"{local.split(':')[0]}:{tag} -> {digest}" in done.stdout.replace(f"{registry.address}/", "")
    for local in pushed_tags:
        client.images.remove(f"{registry.address}/{local}", noprune=True)


def test_wrong_credentials_fail_loudly_and_leave_no_tag(client, registry, small_image):
    _, tags = small_image
    with pytest.raises(ToolingError) as err:
        push_image(tags, registry.address, {"username": registry.username, "password": "wrong"})
    assert "unauthorized" in str(err.value).lower() or "authentication required" in str(err.value)
    assert not [t for i in client.images.list() for t in i.tags if t.startswith(registry.address)]


def test_push_to_a_closed_port_fails_loudly_and_leaves_no_tag(client, small_image):
    _, tags = small_image
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ToolingError) as err:
        push_image(tags, address, {"username": "x", "password": "y"})
    assert address in str(err.value) and "connection refused" in str(err.value).lower()
    assert not [t for i in client.images.list() for t in i.tags if t.startswith(address)]


def test_invoke_push_failure_is_one_paragraph_and_non_zero(registry):
    env = {**os.environ, "REGISTRY_PASSWORD": "wrong"}
    done = subprocess.run([sys.executable, "-m", "invoke", "push", "--registry", registry.address,
                           "--username", registry.username], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert registry.address in done.stderr
