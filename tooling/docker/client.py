"""The connection to the Docker daemon, and reading the daemon's JSON progress streams.

docker-py reports some failures (a refused push, a failed build step) as an `error` item
inside the stream it returns instead of raising: `follow` reads every item and turns such
an item into a ToolingError, so no caller can mistake a failure for success.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import docker
from docker.errors import DockerException

from tooling.errors import ToolingError


def connect() -> docker.DockerClient:
    """A client for the daemon named by DOCKER_HOST (default: the local socket), checked alive.

    Raises ToolingError naming the address tried and how to start a daemon.
    """
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as err:
        raise ToolingError(
            f"No Docker daemon answers at {where} ({_first_line(err)}). Start one "
            "(`sudo ci/start-dockerd.sh` installs docker.io if needed and starts dockerd), or "
            "point DOCKER_HOST at a running daemon."
        ) from None
    return client


def follow(stream: Iterable[dict], what: str, log: Callable[[str], None] | None = print) -> list[dict]:
    """Read a daemon progress stream to its end, echoing text lines; raise on an error item.

    Returns every item, so callers can pick out results (e.g. the pushed digest).
    """
    items = []
    for item in stream:
        items.append(item)
        if "error" in item or "errorDetail" in item:
            detail = item.get("errorDetail", {}).get("message") or item.get("error")
            raise ToolingError(f"{what} failed: {detail.strip()}")
        if log is None:
            continue
        text = item.get("stream")
        if text and text.strip():
            log(text.rstrip("\n"))
        elif item.get("status") and "progress" not in item and item.get("id") is None:
            log(item["status"])
    return items


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
