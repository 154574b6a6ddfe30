"""Capture an XLA profiler trace of a window of training steps (`--profile-steps 10:20`).

The trace goes to RUN_DIR/profile/plugins/profile/<time>/<host>.xplane.pb (and
.trace.json.gz), the layout TensorBoard's profile plugin reads:

    pip install tensorboard-plugin-profile   # once, anywhere (it is a viewer only)
    tensorboard --logdir RUN_DIR/profile     # then open the "Profile" tab

Steps are marked with a step TraceMe (name `train_step`, `step_num`), as `xp.StepTrace`
does, but without its scope and its own `torch_xla.sync()`: the engine already syncs once
per step, a second sync would change what is measured, and a sync inside an open scope
raises "Expecting scope to be empty".
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import UserError

log = logging.getLogger(__name__)
DEFAULT_PORT = 9012


@dataclass(frozen=True)
class StepWindow:
    """Global steps `first` to `last`, both included (1-based, as in steps.csv)."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str, flag: str = "--profile-steps") -> "StepWindow":
        match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(text))
        first, last = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        if not match or first < 1 or last < first:
            raise UserError(
                f"{flag} got {text!r}; allowed: FIRST:LAST, two global step numbers with "
                "1 <= FIRST <= LAST (both included), e.g. 10:20. Fix: pick a window after the "
                "first steps' compilations, e.g. --profile-steps 10:20."
            )
        return cls(first, last)

    def __contains__(self, step: int) -> bool:
        return self.first <= step <= self.last


class ProfilerCapture:
    """`before_step(step)` / `after_step(step)` around each step; `close()` at the end."""

    def __init__(self, window: StepWindow, out_dir: Path, port: int = DEFAULT_PORT):
        self.window, self.out_dir, self.port = window, Path(out_dir), port
        self._server: Any = None
        self._marker: Any = None
        self.active = False
        self.done = False
        self.trace: Path | None = None
        """The .xplane.pb written, once the window has closed."""

    def start(self) -> None:
        """Start the profiler server (before the first step; it must outlive the trace)."""
        import torch_xla.debug.profiler as xp

        try:
            self._server = xp.start_server(self.port)
        except RuntimeError as exc:  # already started in this process (a second fit)
            log.debug("profiler server not started again: %s", exc)

    def before_step(self, step: int) -> None:
        if self.done or step not in self.window:
            return
        import torch_xla

        if not self.active:
            import torch_xla.debug.profiler as xp

            self.out_dir.mkdir(parents=True, exist_ok=True)
            xp.start_trace(str(self.out_dir))
            self.active = True
            log.info("profiling steps %d to %d into %s", self.window.first, self.window.last, self.out_dir)
        xp_trace = torch_xla._XLAC.profiler.TraceMe
        self._marker = xp_trace("train_step", _r=1, step_num=step)
        self._marker.__enter__()

    def after_step(self, step: int) -> None:
        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None
        if self.active and step >= self.window.last:
            self.close()

    def close(self) -> Path | None:
        """Stop and write the trace (also for a run that ended inside the window)."""
        if not self.active:
            return None
        import torch_xla.debug.profiler as xp

        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None
        xp.stop_trace()
        self.active, self.done = False, True
        found = trace_files(self.out_dir)
        self.trace = found[-1] if found else None
        log.info("profiler trace written: %s (view: tensorboard --logdir %s, Profile tab)",
                 self.trace or self.out_dir, self.out_dir)
        return self.trace


def trace_files(out_dir: Path) -> list[Path]:
    return sorted(Path(out_dir).glob("plugins/profile/*/*.xplane.pb"))
