"""Say XLA's per-compilation GSPMD deprecation warning once, in our words; keep the rest.

XLA 2.9 logs "GSPMD sharding propagation is going to be deprecated ... Shardy" from C++
(absl logging to file descriptor 2) on every SPMD compilation. No XLA or TF log setting
targets one message: TF_CPP_MIN_LOG_LEVEL=2 would hide every other warning too, and
TF_CPP_VMODULE only raises verbosity. So the filter works where the line is written:
fd 2 is redirected into a pipe, and a thread copies every byte to the original stderr
except lines matching a known pattern, which are replaced by our sentence the first time
and dropped after. Python's own `sys.stderr` writes go through the same pipe, in order.

Partial lines (tqdm's `\\r` updates) pass through at once; only a partial that starts
like a C++ log line ("2026-11-21 09:08:21.19: W ...") waits for its newline.
"""
from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from typing import Mapping

GSPMD_DEPRECATION = re.compile(rb"GSPMD sharding propagation is going to be deprecated")
GSPMD_SAID_ONCE = (
    "note (tpu-trainer): XLA warns on every SPMD compilation that its GSPMD sharding propagation "
    "will be replaced by Shardy; torch_xla 2.9 has no Shardy, so there is nothing to change. "
    "Shown once; the repeats are hidden.\n"
)
_LOG_LINE_START = re.compile(rb"^\d{4}-\d\d-\d\d \d")


class StderrFilter:
    """Install once per process (`install()`); `uninstall()` flushes and restores fd 2."""

    def __init__(self, replacements: Mapping[re.Pattern, str] | None = None, fd: int = 2):
        self.replacements = dict(replacements or {GSPMD_DEPRECATION: GSPMD_SAID_ONCE})
        self.fd = fd
        self.hidden: dict[str, int] = {}
        self._saved: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def installed(self) -> bool:
        return self._saved is not None

    def install(self) -> "StderrFilter":
        if self.installed:
            return self
        sys.stderr.flush()
        read_end, write_end = os.pipe()
        self._saved = os.dup(self.fd)
        os.dup2(write_end, self.fd)
        os.close(write_end)
        self._thread = threading.Thread(target=self._pump, args=(read_end, os.dup(self._saved)),
                                        name="stderr-filter", daemon=True)
        self._thread.start()
        atexit.register(self.uninstall)
        return self

    def uninstall(self) -> None:
        """Restore fd 2; the thread drains what was written and exits (pipe's write end closed)."""
        if self._saved is None:
            return
        sys.stderr.flush()
        saved, self._saved = self._saved, None
        os.dup2(saved, self.fd)  # closes our pipe end held at fd 2
        if self._thread is not None:
            self._thread.join(timeout=5)  # a child still holding the pipe keeps it open: don't wait for ever
        os.close(saved)

    def _pump(self, read_end: int, out: int) -> None:
        pending = b""  # `out` is the thread's own copy of the original stderr: uninstall closes the saved one
        try:
            while True:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                data = b"".join(self._filter(line + b"\n") for line in lines)
                if pending and not _LOG_LINE_START.match(pending):
                    data, pending = data + pending, b""
                _write_all(out, data)
            _write_all(out, self._filter(pending) if pending else b"")
        finally:
            os.close(read_end)
            os.close(out)

    def _filter(self, line: bytes) -> bytes:
        for pattern, ours in self.replacements.items():
            if pattern.search(line):
                key = pattern.pattern.decode(errors="replace")
                self.hidden[key] = self.hidden.get(key, 0) + 1
                return ours.encode() if self.hidden[key] == 1 else b""
        return line


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


_installed: StderrFilter | None = None


def quiet_xla_logs() -> StderrFilter:
    """The process-wide filter (installed on first call). Call before SPMD compiles."""
    global _installed
    if _installed is None:
        _installed = StderrFilter().install()
    return _installed


def restore_stderr() -> None:
    """Flush and remove the filter, if installed (before an exit that skips `atexit`)."""
    if _installed is not None:
        _installed.uninstall()
