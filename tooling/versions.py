"""The matched torch / torch_xla pairs in `env/versions.yaml`, one image tag per pair.

Reading this file imports no torch and no Docker: a bad `--version` is refused at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from tooling.errors import ToolingError

REPO_ROOT = Path(__file__).resolve().parent.parent
VERSIONS_FILE = REPO_ROOT / "env" / "versions.yaml"


@dataclass(frozen=True)
class VersionPair:
    """One supported pair; `key` is also the image's version tag (e.g. "2.9")."""

    key: str
    torch: str
    """Exact torch version, e.g. "2.9.0"."""
    torch_xla: str
    """Exact torch-xla version; torch_xla's major.minor must equal torch's."""
    python: str
    """Python major.minor the base image must provide, e.g. "3.11"."""
    libtpu: str
    """libtpu wheel version the pair's `[tpu]` extra pins (TPU runtime; unused on CPU)."""

    def __post_init__(self) -> None:
        if _minor(self.torch) != _minor(self.torch_xla):
            raise ToolingError(
                f"{VERSIONS_FILE}: pair {self.key!r} has torch {self.torch} with torch-xla "
                f"{self.torch_xla}; their major.minor must match. Fix the entry."
            )

    @property
    def constraints_file(self) -> Path:
        """The committed pip constraints (a `pip freeze` of a venv with this pair)."""
        return REPO_ROOT / "env" / f"constraints-{self.key}.txt"

    @property
    def default_base_image(self) -> str:
        """The official Debian-based Python image for this pair's Python, by tag."""
        return f"python:{self.python}-slim-bookworm"


def load_pairs(path: Path = VERSIONS_FILE) -> dict[str, VersionPair]:
    """Every pair in `path`, keyed by tag, in file order."""
    data = yaml.safe_load(path.read_text())
    fields = ("torch", "torch_xla", "python", "libtpu")
    pairs = {}
    for key, entry in data["pairs"].items():
        missing = [name for name in fields if name not in entry]
        if missing:
            raise ToolingError(f"{path}: pair {key!r} lacks {', '.join(missing)}; add them.")
        pairs[str(key)] = VersionPair(str(key), *(str(entry[name]) for name in fields))
    return pairs


def default_key(path: Path = VERSIONS_FILE) -> str:
    """The pair `invoke build` uses without `--version`."""
    return str(yaml.safe_load(path.read_text())["default"])


def default_image(repository: str = "tpu-trainer") -> str:
    """The default pair's image, `tpu-trainer:<default>`: what `invoke pod` runs without --image."""
    return f"{repository}:{default_key()}"


def get_pair(key: str | None = None, path: Path = VERSIONS_FILE) -> VersionPair:
    """The pair named `key` (default: the file's `default`); ToolingError listing the choices."""
    pairs = load_pairs(path)
    key = default_key(path) if key is None else str(key)
    if key not in pairs:
        raise ToolingError(
            f"Version {key!r} is not in {path.relative_to(REPO_ROOT)}; the pairs are "
            f"{', '.join(sorted(pairs))}. Pass one of them with --version, or add an entry "
            f"for {key!r} (torch, torch_xla, python, libtpu) and its env/constraints-{key}.txt."
        )
    pair = pairs[key]
    if not pair.constraints_file.is_file():
        raise ToolingError(
            f"Pair {key!r} has no lock file {pair.constraints_file.relative_to(REPO_ROOT)}. "
            f"Make it with `pip freeze` in a fresh venv holding torch=={pair.torch} "
            f"torch-xla=={pair.torch_xla} and the runtime dependencies of pyproject.toml."
        )
    return pair


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])
