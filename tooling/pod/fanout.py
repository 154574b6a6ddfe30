"""Run one command per worker at once, stream their lines prefixed, stop the rest on failure.

A multi-host job is all-or-nothing: when one worker dies the others block forever in their
next collective, so the first failure stops every other worker (remotely, through the
`stop` callback, then locally) and the caller reports the one that failed first.
"""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

TAIL_LINES = 20
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class Outcome:
    """How each worker's command ended (None: killed by us after another's failure)."""

    codes: tuple[int | None, ...]
    first_failure: int | None
    """Index of the worker whose failure stopped the rest (None if all succeeded)."""
    tails: tuple[tuple[str, ...], ...]
    """Each worker's last lines, for the error message."""

    @property
    def ok(self) -> bool:
        return self.first_failure is None


class _Worker:
    def __init__(self, argv: list[str], prefix: str, out: IO[str], lock: threading.Lock):
        self.prefix, self.out, self.lock = prefix, out, lock
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        # Own session: gcloud runs ssh as a child, and both must go when we kill.
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        # "\r" ends a line too: a progress bar redraws with it and would otherwise pile up
        # into one endless line that is printed only when the bar finishes.
        assert self.process.stdout is not None
        fd, pending = self.process.stdout.fileno(), b""
        while chunk := os.read(fd, 65536):
            *lines, pending = _LINE_END.split(pending + chunk)
            self._emit(lines)
        self._emit([pending])

    def _emit(self, lines: list[bytes]) -> None:
        text = [raw.decode("utf-8", "replace") for raw in lines if raw]
        self.tail.extend(text)
        with self.lock:
            self.out.writelines(f"{self.prefix}{line}\n" for line in text)
            self.out.flush()

    def wait(self) -> int:
        code = self.process.wait()
        self.reader.join(timeout=2)  # a remote orphan may hold the pipe; don't hang on it
        return code

    def kill(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass


def fan_out(
    commands: Sequence[list[str]],
    prefixes: Sequence[str],
    stop: Callable[[int], None] | None = None,
    grace_seconds: float = 10.0,
    out: IO[str] | None = None,
    stop_on_failure: bool = True,
) -> Outcome:
    """Run `commands[i]` for every i; stream output as `prefixes[i] + line`.

    `stop(i)` must make worker i's remote side exit (it runs on its own connection); the
    local process is then given `grace_seconds` plus a margin before it is killed.
    Ctrl-C stops every worker the same way and re-raises. With `stop_on_failure=False`
    (housekeeping, not a job) every command runs to its end.
    """
    out = out if out is not None else sys.stdout
    lock = threading.Lock()
    workers = [_Worker(list(argv), p, out, lock) for argv, p in zip(commands, prefixes)]
    codes: list[int | None] = [None] * len(workers)
    ended: queue.Queue[tuple[int, int]] = queue.Queue()
    for i, worker in enumerate(workers):
        threading.Thread(target=lambda i=i, w=worker: ended.put((i, w.wait())), daemon=True).start()
    first_failure = None
    try:
        while any(code is None for code in codes):
            i, code = ended.get()
            codes[i] = code
            if code != 0 and first_failure is None:
                first_failure = i
                if stop_on_failure:
                    break
    except KeyboardInterrupt:
        _stop_rest(workers, [i for i, c in enumerate(codes) if c is None], stop, grace_seconds)
        raise
    if first_failure is not None:
        # Codes of stopped workers would say "stopped by us", not their own failure.
        running = [i for i, code in enumerate(codes) if code is None]
        _stop_rest(workers, running, stop, grace_seconds)
    return Outcome(tuple(codes), first_failure, tuple(tuple(w.tail) for w in workers))


def _stop_rest(
    workers: list[_Worker],
    running: list[int],
    stop: Callable[[int], None] | None,
    grace_seconds: float,
) -> None:
    """Stop remotely, then locally: SIGTERM to each local session, SIGKILL as last resort."""
    if stop is not None:
        stoppers = [threading.Thread(target=stop, args=(i,), daemon=True) for i in running]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout=grace_seconds + 30)
    waits = ([grace_seconds + 5] if stop is not None else [0.0]) + [5.0, 5.0]
    for sig, wait in zip((None, signal.SIGTERM, signal.SIGKILL), waits):
        alive = [i for i in running if workers[i].process.poll() is None]
        if not alive:
            break
        if sig is not None:
            for i in alive:
                workers[i].kill(sig)
        deadline = time.monotonic() + wait
        for i in alive:
            try:
                workers[i].process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    for i in running:
        workers[i].reader.join(timeout=2)
