"""Real `python -m trainer train` processes for the checkpoint, resume and preemption tests.

Nothing here is mocked: the helpers start the CLI, wait for what it writes to disk, send
real signals, and read steps.csv (the exact `repr` of every loss) back.
"""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
SLOW = "tests.helpers_modules:SlowDigits"
BIG = "tests.helpers_modules:Big"


def train_argv(run_dir: Path, *extra: str, module: str = SLOW, epochs: int = 3) -> list[str]:
    return [sys.executable, "-m", "trainer", "train", "--module", module, "--max-epochs", str(epochs),
            "--log-every-n-steps", "1", "--no-progress", "--env-profile", "cpu", "--run-dir", str(run_dir), *extra]


def start(argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """Start the CLI in its own process group, output to `log` (read it while it runs);
    `env`: variables added to this process's environment."""
    out = open(log, "w")
    return subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **(env or {})})


def finish(proc: subprocess.Popen, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def run(argv: list[str], log: Path, timeout: float = 300) -> int:
    return finish(start(argv, log), timeout)


def wait_for(condition: Callable[[], bool], what: str, proc: subprocess.Popen | None = None,
             timeout: float = 120, poll: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll)


def steps(run_dir: Path) -> list[tuple[int, int, str]]:
    """(global_step, epoch, repr(loss)) of every logged step."""
    with open(run_dir / "steps.csv", newline="") as f:
        return [(int(r["global_step"]), int(r["epoch"]), r["loss"]) for r in csv.DictReader(f)]


def text(log: Path) -> str:
    return log.read_text(errors="replace")
