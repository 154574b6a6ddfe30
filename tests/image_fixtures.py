"""Shared fixtures for the Docker-marked image tests (imported by tests/test_image*.py).

They use the default pair's image that `invoke test-image` (`make test-image`) just built;
tests that build build on the same base image that image records in its labels.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tooling.versions import REPO_ROOT, get_pair

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="session")
def client():
    from tooling.docker.client import connect

    return connect()  # a ToolingError here fails the run: `make test-image` needs a daemon


@pytest.fixture(scope="session")
def pair():
    return get_pair()


@pytest.fixture(scope="session")
def image(client, pair):
    from docker.errors import ImageNotFound

    try:
        return client.images.get(f"tpu-trainer:{pair.key}")
    except ImageNotFound:
        pytest.fail(f"tpu-trainer:{pair.key} is not built; `make test-image` builds it first.")


@pytest.fixture(scope="session")
def base_image(image) -> str:
    return image.labels["org.opencontainers.image.base.name"]


def copy_sources(dest: Path) -> Path:
    """A build context like the repo's (Dockerfile, .dockerignore, pyproject, env, trainer)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml"):
        shutil.copy2(REPO_ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("env", "trainer"):
        shutil.copytree(REPO_ROOT / name, dest / name, ignore=ignore)
    return dest
