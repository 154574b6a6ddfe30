"""Preemption: SIGTERM/SIGINT become "stop at the next step boundary, save, exit".

Spot/preemptible TPU VMs get SIGTERM shortly before they go away. The handlers here
only record the signal: the training loop checks `requested` after each step's sync,
writes a checkpoint there, and the CLI exits with 128 + the signal number (143 for
SIGTERM, as Lightning does; 130 for SIGINT). Doing the work at a step boundary, not in
the handler, means no half-traced graph and no checkpoint of a half-updated model.
A second signal while the checkpoint is written is reported and otherwise ignored: the
save is atomic anyway, and aborting it would only lose the checkpoint. Use SIGKILL to
stop at once (the previous checkpoint stays valid).
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Any

EXIT_CODES = {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: 128 + signal.SIGINT}


class TrainingInterrupted(Exception):
    """Raised by `Trainer.fit` after a signal: a checkpoint was written; resume to continue."""

    def __init__(self, signum: int, checkpoint: Any):
        self.signum = signum
        self.exit_code = EXIT_CODES.get(signum, 128 + signum)
        self.checkpoint = checkpoint
        name = signal.Signals(signum).name
        where = (f"at a step boundary; saved checkpoint {checkpoint}" if checkpoint else
                 "before a new checkpoint was due (during set-up, or on a process that does not write them)")
        super().__init__(
            f"stopped by {name} {where}. Continue with --resume auto (make train ... RESUME=auto). "
            f"Exit code {self.exit_code}."
        )


class StopRequest:
    """Installs SIGTERM/SIGINT handlers that set a flag; a context manager restores the old ones."""

    def __init__(self, signals: tuple = (signal.SIGTERM, signal.SIGINT)):
        self.signals = signals
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # Python only allows it there
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        # Only async-signal-safe work here: a flag and a raw write (no logging locks).
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            message = f"\n{name} received: finishing the current step, then saving a checkpoint and exiting ({EXIT_CODES.get(signum, 128 + signum)}).\n"
        else:
            message = f"\n{name} received again: already stopping; the checkpoint is being written, please wait (SIGKILL stops at once; the previous checkpoint stays valid).\n"
        try:
            os.write(2, message.encode())
        except OSError:
            pass
