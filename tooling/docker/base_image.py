"""Make an offline stand-in for the official `python:3.11-slim-bookworm` base image.

Machines without Docker Hub cannot pull the default base. `make_base_image` builds an
equivalent from Debian's own mirror with debootstrap and imports it with the Docker SDK:
Debian bookworm, Python 3.11 with venv, `libpython3.11` (torch_xla's `_XLAC` links it;
the official image ships it) and the CA certificates. Needs root and `debootstrap`.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from docker.errors import ImageNotFound

from tooling.docker.client import connect
from tooling.errors import ToolingError

DEFAULT_TAG = "tpu-trainer-base:3.11-bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "libpython3.11", "ca-certificates")
# What the official python images set and our Dockerfile relies on.
CHANGES = ('ENV LANG=C.UTF-8', 'CMD ["python3"]')


def make_base_image(tag: str = DEFAULT_TAG, suite: str = "bookworm",
                    mirror: str = DEFAULT_MIRROR, force: bool = False, log=print) -> str:
    """Debootstrap `suite` into a temp dir and import it as `tag`; return the image id.

    An existing `tag` is kept unless `force`: a new import is a new base, which would
    invalidate every cached layer built on it. Raises ToolingError when debootstrap is
    missing or fails, or the daemon is unreachable. The temp root is removed in any case.
    """
    client = connect()
    if not force:
        try:
            existing = client.images.get(tag)
            log(f"{tag} exists ({existing.short_id}); keeping it (--force makes it again)")
            return existing.id
        except ImageNotFound:
            pass
    if shutil.which("debootstrap") is None:
        raise ToolingError(
            "`debootstrap` is not installed, so the offline base image cannot be made. "
            "Install it (`apt-get install -y debootstrap`, or run `ci/start-dockerd.sh`, which "
            "installs it) or pass an existing base with `invoke build --base-image NAME:TAG`."
        )
    repository, _, image_tag = tag.rpartition(":")
    if not repository:
        raise ToolingError(f"Base image tag {tag!r} needs the form NAME:TAG, e.g. {DEFAULT_TAG}.")
    with tempfile.TemporaryDirectory(prefix="tpu-trainer-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"debootstrap {suite} from {mirror} into {rootfs} (about 40 s) ...")
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
             suite, str(rootfs), mirror],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise ToolingError(
                f"debootstrap of {suite} from {mirror} failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-800:] or done.stdout.strip()[-800:]} "
                "Check that the mirror is reachable, or pass another with --mirror."
            )
        # Package lists and caches only make the image bigger; apt can refetch them.
        for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for child in (rootfs / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        log(f"importing {rootfs} as {tag} ...")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                               stdout=subprocess.PIPE)
        try:
            reply = client.api.import_image_from_stream(
                tar.stdout, repository=repository, tag=image_tag, changes=list(CHANGES))
        finally:
            tar.stdout.close()
            tar.wait()
        if tar.returncode != 0:
            raise ToolingError(f"tar of the debootstrapped root failed (exit {tar.returncode}).")
    # The import's reply is the daemon's JSON progress stream, errors included.
    for line in str(reply).splitlines():
        item = json.loads(line) if line.strip().startswith("{") else {}
        if "error" in item or "errorDetail" in item:
            raise ToolingError(f"The Docker daemon refused to import {tag}: {item.get('error') or item}")
    image = client.images.get(tag)
    log(f"{tag}: {image.short_id}, {image.attrs['Size'] / 1e6:.0f} MB")
    return image.id
