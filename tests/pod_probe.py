"""Helpers for the pod tests (not a test module): run the real `invoke`, and a worker probe.

The probe is the program each worker runs instead of the engine (`--image none
--entrypoint PROBE`): XLA on CPU cannot form a multi-process world, so a pod run cannot
train here, but what each worker is given (args, environment) and how it exits can be
observed for real. It prints one line, records its pid, and crashes, hangs or ignores
SIGTERM when its arguments say so.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""#!/bin/bash
i=$TPU_TRAINER_PROCESS_INDEX
echo "probe args=[$*] index=$i count=$TPU_TRAINER_PROCESS_COUNT pjrt=$PJRT_DEVICE worker_id=${TPU_WORKER_ID-unset} hosts=${TPU_WORKER_HOSTNAMES-unset} image=${TPU_TRAINER_IMAGE-unset}"
echo $$ > "@DIR@/pid-$i"
case " $* " in *" --fail-worker $i "*) sleep 1; echo "worker $i: simulated crash" >&2; exit 3;; esac
case " $* " in *" --ignore-term-worker $i "*) trap '' TERM;; esac
case " $* " in *" --hang "*) exec sleep 300;; esac
exit 0
"""


def write_probe(dir: Path) -> Path:
    path = dir / "probe"
    path.write_text(PROBE.replace("@DIR@", str(dir)))
    path.chmod(0o755)
    return path


def invoke(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS` from the repo root, as a user would type it."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT,
    )  # fmt: skip


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as dead: it holds nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def pids(dir: Path) -> dict[int, int]:
    """Worker index -> pid of its probe, for the workers whose probe started."""
    return {int(p.name.split("-")[1]): int(p.read_text()) for p in dir.glob("pid-*")}


def env_with_path(first: Path | None = None, path: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = path if path is not None else f"{first}{os.pathsep}{env.get('PATH', '')}"
    return env
