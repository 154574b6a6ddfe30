"""How the user spelled an option, so that an error quotes it back in their own words.

The same setting has three spellings: `Trainer(devices=3)` from Python, `--cores 3` on
the CLI (and `invoke train`), `CORES=3` for make. An error that answers a Python user
with a Makefile variable sends them looking for something they never typed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FRONT_ENDS = ("python", "cli", "make")

# config key -> (Trainer keyword, CLI flag, make variable)
_NAMES = {
    "devices": ("devices", "--cores", "CORES"),
    "precision": ("precision", "--precision", "PRECISION"),
    "strategy": ("strategy", "--strategy", "STRATEGY"),
    "mesh": ("mesh", "--mesh", "MESH"),
    "run_dir": ("run_dir", "--run-dir", "RUN_DIR"),
}


@dataclass(frozen=True)
class Spelling:
    """The front end a run was started from: python (the library), cli, or make."""

    front_end: str = "python"

    def __post_init__(self) -> None:
        assert self.front_end in FRONT_ENDS, self.front_end

    def name(self, key: str) -> str:
        """The option's own name in this front end: `devices`, `--cores`, `CORES`."""
        return _NAMES[key][FRONT_ENDS.index(self.front_end)]

    def assign(self, key: str, value: Any) -> str:
        """The setting as the user wrote it: `devices=3`, `--cores 3`, `CORES=3`."""
        keyword, flag, variable = _NAMES[key]
        if self.front_end == "python":
            return f"{keyword}={value!r}"
        if self.front_end == "cli":
            return f"{flag} {_plain(value)}"
        return f"{variable}={value!r}" if isinstance(value, str) else f"{variable}={_plain(value)}"

    def example(self, key: str, value: Any) -> str:
        """A complete command with that setting, for the "Fix:" part of a message."""
        keyword, flag, variable = _NAMES[key]
        if self.front_end == "python":
            return f"Trainer({keyword}={value!r})"
        if self.front_end == "cli":
            return f"tpu-trainer train {flag} {_plain(value)}"
        return f"make train {variable}={_plain(value)}"


def _plain(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)
