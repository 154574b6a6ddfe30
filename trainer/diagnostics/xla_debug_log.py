"""torch_xla's own explanation of each compilation and unexpected execution, parsed.

With `PT_XLA_DEBUG_LEVEL=2` torch_xla 2.9 writes, for every compilation and every
execution that was not a `torch_xla.sync()`, a block with its cause ("most likely user
code trying to access tensor value before torch_xla.sync") and the Python frames that
triggered it (`user_step (train.py:13)`); `PT_XLA_DEBUG_FILE` sends the blocks to a file
instead of stderr. Level 1 reports compilations only, so a `.item()` in a step that
replays a cached graph would go unseen.

When to set it: torch_xla reads the level once, into a C++ static, on the first
compilation or execution; setting it after `import torch_xla` but before any tensor work
takes effect (measured), setting it later does not. The engine should apply
`debug_environment(path)` together with the profile's variables, before `start_xla`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trainer.runtime import env_vars

# Frames inside these packages are the machinery; the first frame outside is the culprit.
_MACHINERY = re.compile(r"[/\\](torch|torch_xla|tqdm|concurrent)[/\\]|[/\\]threading\.py:|"
                        r"[/\\]trainer[/\\](loop|session|engine|device_loader|diagnostics)")
_FRAME = re.compile(r"^\s*(\S+) \((.+):(\d+)\)\s*$")


def debug_environment(path: Path) -> dict[str, str]:
    return {env_vars.PT_XLA_DEBUG_LEVEL: "2", env_vars.PT_XLA_DEBUG_FILE: str(path)}


@dataclass(frozen=True)
class Analysis:
    kind: str
    """"Compilation" or "Execution"."""
    cause: str
    frames: tuple[str, ...]

    @property
    def culprit(self) -> str:
        """The first Python frame outside torch/torch_xla/our engine, else the innermost one."""
        for frame in self.frames:
            if not _MACHINERY.search(frame):
                return frame
        return self.frames[0] if self.frames else "unknown"

    @property
    def is_host_read(self) -> bool:
        return "access tensor value" in self.cause


class DebugLog:
    """Reads the blocks torch_xla appended to its debug file since the last read."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0

    def position(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def skip_to_end(self) -> None:
        self._offset = self.position()

    def read_new(self) -> list[Analysis]:
        try:
            with open(self.path, "r", errors="replace") as f:
                f.seek(self._offset)
                text = f.read()
                self._offset = f.tell()
        except FileNotFoundError:
            return []
        return parse(text)


def parse(text: str) -> list[Analysis]:
    found: list[Analysis] = []
    kind, cause, frames, section = None, "", [], ""
    for raw in text.splitlines():
        match = re.match(r"^(Compilation|Execution) Analysis: (.*)$", raw)
        if not match:
            continue
        block_kind, body = match.groups()
        stripped = body.strip()
        if stripped.startswith("====="):
            if kind is not None and (cause or frames):
                found.append(Analysis(kind, cause, tuple(frames)))
            kind, cause, frames, section = block_kind, "", [], ""
        elif stripped in ("Compilation Cause", "Execution Cause"):
            section = "cause"
        elif stripped.startswith("Python Frame Triggered Execution"):
            section = "frames"
        elif stripped.startswith("Graph Info") or stripped.startswith("-----"):
            section = ""
        elif section == "cause" and stripped:
            cause = f"{cause}; {stripped}" if cause else stripped
        elif section == "frames" and _FRAME.match(body):
            frames.append(stripped)
    if kind is not None and (cause or frames):
        found.append(Analysis(kind, cause, tuple(frames)))
    return found
