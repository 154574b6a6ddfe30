"""Where a short default run spends its time outside its epochs.

    python -m tooling.bench.overhead [--repeat 3] [--tree DIR] [--epochs 3]

Runs `python -m trainer train --max-epochs 3 --no-progress` as a fresh process, with the
engine's own log lines time-stamped (ms since start), and splits the wall clock into
before the first step (wall up to epoch 1's log line minus epoch 1's seconds), the
epochs, and after the last step (exit minus the last epoch's log line). `--tree` runs
another checkout (e.g. a `git archive` of an older commit) for a before/after comparison.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DRIVER = ("import logging, sys; logging.basicConfig(level=logging.INFO, format='%(relativeCreated)d %(name)s: "
          "%(message)s'); from trainer.cli import main; sys.exit(main(sys.argv[1:]))")


def one_run(tree: Path, epochs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", DRIVER, "train", "--max-epochs", str(epochs), "--no-progress",
                               "--run-dir", f"{tmp}/run"], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    epochs_at = [(int(m.group(1)) / 1e3, float(m.group(2)))
                 for m in re.finditer(r"^(\d+) trainer\.session: epoch \d+/\d+: .*epoch_seconds ([\d.]+)", proc.stderr, re.M)]
    first_line, first_seconds = epochs_at[0]
    last_line = epochs_at[-1][0]
    before = first_line - first_seconds
    return {"wall": wall, "before_first_step": before, "epochs": sum(s for _, s in epochs_at),
            "after_last_step": wall - last_line, "outside_epochs": wall - sum(s for _, s in epochs_at)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    runs = [one_run(Path(args.tree), args.epochs) for _ in range(args.repeat)]
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"{key:18s} median {statistics.median(values):6.2f} s   rounds {' '.join(f'{v:.2f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
