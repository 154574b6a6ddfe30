"""Push an image's tags to a registry and prove the push by pulling the digest back.

docker-py's `push` does not raise when the registry refuses (bad credentials, unknown
host): the refusal is an item inside the returned stream. `push_image` reads the whole
stream (`docker_client.follow`), so every refusal becomes a ToolingError carrying the
registry's own message.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from docker.errors import APIError, ImageNotFound

from tooling.docker.client import connect, follow
from tooling.errors import ToolingError


@dataclass(frozen=True)
class PushedTag:
    reference: str
    """registry/repository:tag as pushed."""
    digest: str
    """Manifest digest the registry reported (sha256:...), verified by pulling it back."""


def push_image(local_tags: tuple[str, ...], registry: str, auth: dict | None = None,
               log: Callable[[str], None] = print) -> list[PushedTag]:
    """Push each `repository:tag` in `local_tags` to `registry` (HOST:PORT).

    `auth` is {"username", "password"}; None uses the credentials of `docker login`.
    Each tag's manifest digest is pulled back by digest and must resolve to the local
    image's id. Registry-prefixed tags made for the push are removed again if it fails.
    """
    client = connect()
    try:
        image = client.images.get(local_tags[0])
    except ImageNotFound:
        raise ToolingError(
            f"No local image {local_tags[0]} to push. Build it first: `invoke build`."
        ) from None
    created: list[str] = []
    pushed: list[PushedTag] = []
    try:
        for local in local_tags:
            repository, _, tag = local.rpartition(":")
            remote = f"{registry}/{repository}"
            if f"{remote}:{tag}" not in image.tags:
                image.tag(remote, tag)
                created.append(f"{remote}:{tag}")
            log(f"pushing {remote}:{tag} ...")
            try:
                stream = client.api.push(remote, tag=tag, stream=True, decode=True, auth_config=auth)
                items = follow(stream, f"Pushing {remote}:{tag} to {registry}", log=None)
            except APIError as err:
                raise ToolingError(f"Pushing {remote}:{tag} to {registry} failed: {err.explanation}") from None
            digest = next((i["aux"]["Digest"] for i in items if "Digest" in i.get("aux", {})), None)
            if digest is None:
                raise ToolingError(
                    f"Pushing {remote}:{tag} to {registry} reported no digest; the registry may "
                    "not have stored it. Check the registry's log."
                )
            _verify(client, remote, digest, image.id, auth)
            log(f"pushed and verified {remote}:{tag} -> {digest}")
            pushed.append(PushedTag(f"{remote}:{tag}", digest))
    except ToolingError:
        for reference in created:
            client.images.remove(reference, noprune=True)
        raise
    return pushed


def _verify(client, remote: str, digest: str, image_id: str, auth: dict | None) -> None:
    """Pull `remote@digest` and check it is our image (the id is the config's digest)."""
    reference = f"{remote}@{digest}"
    try:
        # Like push, pull reports failures inside its stream: follow() raises on them.
        follow(client.api.pull(reference, stream=True, decode=True, auth_config=auth),
               f"Pulling {reference} back", log=None)
        pulled = client.images.get(reference)
    except APIError as err:
        raise ToolingError(
            f"The push reported {digest}, but pulling {reference} back failed: {err.explanation}"
        ) from None
    if pulled.id != image_id:
        raise ToolingError(
            f"Pulling {reference} back gave image {pulled.id}, not the pushed {image_id}: the "
            "registry holds something else under that digest."
        )
