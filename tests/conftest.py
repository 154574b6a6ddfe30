"""Shared fixtures. Run everything but the image tests with `make test`.

In-process XLA tests use one CPU device; SPMD (8 devices) runs only in subprocesses
through the real CLI, because a process's PJRT client and SPMD mode are fixed at start.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def xla_device():
    """One PJRT CPU device for in-process tests (set before the runtime starts)."""
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = "1"
    os.environ["XLA_NO_SPECIAL_SCALARS"] = "1"  # as env/cpu.yaml: read when torch_xla is imported
    import torch_xla

    return torch_xla.device()


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path | None

    @property
    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())


def run_cli(*args: str, run_dir: Path | None = None, timeout: float = 300, env: dict | None = None) -> CliRun:
    """`python -m trainer ARGS` in a subprocess, as a user would run it."""
    argv = [sys.executable, "-m", "trainer", *args]
    if run_dir is not None:
        argv += ["--run-dir", str(run_dir)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    return CliRun(proc.returncode, proc.stdout, proc.stderr, run_dir)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def fresh_seed_env(monkeypatch):
    """Lightning's seed_everything writes PL_GLOBAL_SEED into the process; give it back afterwards."""
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")
    monkeypatch.delenv("PL_GLOBAL_SEED")
