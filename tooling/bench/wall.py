"""Wall time from process start to exit for a short run: the engine's CLI against the plain script."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _timed(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds


def wall_rounds(workload_module: str, workload: str, devices: int, epochs: int, rounds: int,
                engine_flags: list[str] = ()) -> dict[str, list[float]]:
    """Interleaved: engine then plain, plain then engine, ... one fresh process each."""
    out: dict[str, list[float]] = {"engine": [], "plain": []}
    with tempfile.TemporaryDirectory(prefix="bench-wall-") as tmp:
        for index in range(rounds):
            engine = [sys.executable, "-m", "trainer", "train", "--module", workload_module, "--cores", str(devices),
                      "--max-epochs", str(epochs), "--env-profile", "cpu", "--run-dir", f"{tmp}/run-{index}",
                      *engine_flags]
            plain = [sys.executable, "-m", "tooling.bench.plain_script", "--devices", str(devices),
                     "--epochs", str(epochs), "--workload", workload]
            for side in (("engine", "plain") if index % 2 == 0 else ("plain", "engine")):
                out[side].append(_timed(engine if side == "engine" else plain))
                print(f"{workload} x{devices} wall round {index + 1} {side}: {out[side][-1]:.2f} s",
                      file=sys.stderr, flush=True)
    return out
