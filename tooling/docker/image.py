"""Build `tpu-trainer:<pair>` images from the Dockerfile through the Docker SDK.

Each image carries one matched torch / torch_xla pair (env/versions.yaml) and two tags:
the version tag (`tpu-trainer:2.9`, moves with each build) and an immutable one
(`tpu-trainer:2.9-<git short sha>`). The build context is made here, not by the daemon's
client: an allowlist (.dockerignore), file times fixed at SOURCE_DATE_EPOCH so that
rebuilding one commit gives the same layers, and the optional CA bundle for a
TLS-intercepting proxy, which only the Dockerfile's `deps` stage reads.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from docker.errors import APIError, ImageNotFound
from docker.utils.build import exclude_paths

from tooling.docker.client import connect, follow
from tooling.errors import ToolingError
from tooling.versions import REPO_ROOT, VersionPair

REPOSITORY = "tpu-trainer"
DEFAULT_INDEX_URL = "https://pypi.org/simple"
CA_IN_CONTEXT = ".build/extra-ca.crt"  # the Dockerfile's deps stage looks for exactly this
SOURCE_DATE_EPOCH = 315532800  # 1980-01-01, the Dockerfile's default; zip-safe
LABEL_PREFIX = "dev.tpu-trainer"


@dataclass(frozen=True)
class BuildOptions:
    """How to build one pair's image."""

    base_image: str | None = None
    """Base image by name:tag; None means the pair's official `python:X.Y-slim-bookworm`."""
    ca_bundle: Path | None = None
    """Extra CA bundle (PEM) pip needs behind a TLS-intercepting proxy; never in the image."""
    index_url: str = DEFAULT_INDEX_URL
    """Python package index; e.g. PyTorch's CPU index gives much smaller images where reachable."""
    repository: str = REPOSITORY
    no_cache: bool = False
    context_root: Path = REPO_ROOT
    """Directory holding Dockerfile, .dockerignore and the sources (tests use a copy)."""


@dataclass(frozen=True)
class BuiltImage:
    id: str
    tags: tuple[str, ...]
    """(version tag, immutable tag), both `repository:tag`."""


@dataclass(frozen=True)
class GitRevision:
    full: str
    short: str
    dirty: bool


def git_revision(root: Path = REPO_ROOT) -> GitRevision:
    """The checkout's commit; `short` is "uncommitted" before the first commit."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    full = git("rev-parse", "HEAD")
    # Only the image's inputs count: an edited README does not make the image differ.
    dirty = bool(git("status", "--porcelain", "--", "trainer", "env", "Dockerfile",
                     ".dockerignore", "pyproject.toml"))
    return GitRevision(full or "unknown", full[:12] if full else "uncommitted", dirty)


def image_tags(pair: VersionPair, revision: GitRevision, repository: str = REPOSITORY) -> tuple[str, str]:
    """(version tag, immutable tag). A dirty tree gets `-dirty`: its content is not the commit's."""
    immutable = f"{pair.key}-{revision.short}" + ("-dirty" if revision.dirty else "")
    return f"{repository}:{pair.key}", f"{repository}:{immutable}"


def build_image(pair: VersionPair, options: BuildOptions = BuildOptions(),
                log: Callable[[str], None] = print) -> BuiltImage:
    """Build `pair`'s image, streaming the daemon's output to `log`; tag it twice.

    Raises ToolingError if the daemon is unreachable, the base image is missing and cannot
    be pulled, the CA bundle is unreadable, or any build step fails (e.g. the pair check).
    """
    client = connect()
    base = options.base_image or pair.default_base_image
    _ensure_base(client, base)
    if options.ca_bundle is not None and not Path(options.ca_bundle).is_file():
        raise ToolingError(
            f"CA bundle {options.ca_bundle} is not a readable file. Pass the PEM bundle your "
            "proxy's certificates are in (here: /etc/ssl/certs/ca-certificates.crt) to --ca-bundle."
        )
    revision = git_revision(Path(options.context_root))
    version_tag, immutable_tag = image_tags(pair, revision, options.repository)
    buildargs = {
        "BASE_IMAGE": base,
        "PAIR": pair.key,
        "TORCH_VERSION": pair.torch,
        "TORCH_XLA_VERSION": pair.torch_xla,
        "LIBTPU_VERSION": pair.libtpu,
        "PIP_INDEX_URL": options.index_url,
        "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH),
        "IMAGE_TAG": immutable_tag,
    }
    labels = {
        "org.opencontainers.image.title": "tpu-trainer",
        "org.opencontainers.image.version": pair.key,
        "org.opencontainers.image.revision": revision.full + ("-dirty" if revision.dirty else ""),
        "org.opencontainers.image.created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "org.opencontainers.image.base.name": base,
        f"{LABEL_PREFIX}.torch": pair.torch,
        f"{LABEL_PREFIX}.torch_xla": pair.torch_xla,
        f"{LABEL_PREFIX}.python": pair.python,
        f"{LABEL_PREFIX}.libtpu": pair.libtpu,
        # Inputs of the cached deps layer, so a later build can ask for the same cache.
        f"{LABEL_PREFIX}.index-url": options.index_url,
        f"{LABEL_PREFIX}.build-ca-sha256": _sha256(options.ca_bundle) if options.ca_bundle else "",
    }
    log(f"building {version_tag} ({immutable_tag}) from {base}: torch {pair.torch}, "
        f"torch-xla {pair.torch_xla}")
    with tempfile.TemporaryFile() as context:
        _write_context(context, options.ca_bundle, Path(options.context_root))
        context.seek(0)
        try:
            stream = client.api.build(
                fileobj=context, custom_context=True, tag=version_tag, buildargs=buildargs,
                labels=labels, rm=True, forcerm=True, nocache=options.no_cache, pull=False,
                decode=True,
            )
            items = follow(stream, f"Building {version_tag}", log)
        except APIError as err:
            raise ToolingError(f"The Docker daemon refused the build of {version_tag}: {err.explanation}") from None
    image_id = next((item["aux"]["ID"] for item in reversed(items) if "ID" in item.get("aux", {})), None)
    if image_id is None:
        raise ToolingError(f"Building {version_tag} ended without an image id; see the log above.")
    image = client.images.get(image_id)
    repository, _, tag = immutable_tag.rpartition(":")
    image.tag(repository, tag)
    log(f"built {image.short_id}: {version_tag}, {immutable_tag} ({image.attrs['Size'] / 1e9:.2f} GB)")
    return BuiltImage(image.id, (version_tag, immutable_tag))


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _ensure_base(client, base: str) -> None:
    """Have `base` locally, pulling it if needed; the legacy builder's own pull error is cryptic."""
    try:
        client.images.get(base)
        return
    except ImageNotFound:
        pass
    try:
        client.images.pull(base)
    except APIError as err:
        raise ToolingError(
            f"Base image {base!r} is not on this machine and cannot be pulled "
            f"({err.explanation}). Without Docker Hub, make an equivalent offline with "
            "`invoke base-image` and build on it: `invoke build --base-image "
            "tpu-trainer-base:3.11-bookworm`."
        ) from None


def _write_context(fileobj, ca_bundle: Path | None, root: Path = REPO_ROOT) -> None:
    """The build context as a tar: the .dockerignore allowlist, fixed owners and times."""
    patterns = [line.strip() for line in (root / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    names = sorted(exclude_paths(str(root), patterns))
    names = [name for name in names if name != CA_IN_CONTEXT]  # only --ca-bundle puts one there

    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = SOURCE_DATE_EPOCH
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for name in names:
            tar.add(root / name, arcname=name, recursive=False, filter=normalize)
        if ca_bundle is not None:
            tar.add(Path(ca_bundle).resolve(), arcname=CA_IN_CONTEXT, filter=normalize)
