"""The CPU-XLA smoke matrix: every pair x CORES x PRECISION, each inside its pair's image.

Each cell runs `tpu-trainer train` in a container (tooling.docker.container), then reads the run's
`summary.json` from the mounted run directory. A cell passes when the container exits 0,
validation accuracy reaches the engine's bar and no graph compiles after the first epoch.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tooling.docker.container import RUNS_IN_CONTAINER, RunSpec, run_container
from tooling.versions import VersionPair

CORES = ("1", "8")
PRECISIONS = ("fp32", "bf16")
MIN_VAL_ACCURACY = 0.95  # the engine issue's bar for the default job


@dataclass(frozen=True)
class Cell:
    pair: VersionPair
    cores: str
    precision: str

    @property
    def name(self) -> str:
        return f"{self.pair.key}-cores{self.cores}-{self.precision}"


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    exit_code: int
    seconds: float
    summary: dict | None
    problem: str
    """Empty when the cell passed; else why it failed, in a few words."""

    @property
    def passed(self) -> bool:
        return not self.problem


def cells(pairs: Iterable[VersionPair], cores: Iterable[str] = CORES,
          precisions: Iterable[str] = PRECISIONS) -> list[Cell]:
    return [Cell(p, c, q) for p in pairs for c in cores for q in precisions]


def run_cell(cell: Cell, run_root: Path, max_epochs: int | None, repository: str = "tpu-trainer",
             log: Callable[[str], None] = print) -> CellResult:
    """Train one cell in `repository:<pair>`; outputs land in run_root/<cell name>."""
    args = ["train", "--cores", cell.cores, "--precision", cell.precision, "--seed", "0",
            "--env-profile", "cpu", "--no-progress", "--run-dir", f"{RUNS_IN_CONTAINER}/{cell.name}"]
    if max_epochs is not None:
        args += ["--max-epochs", str(max_epochs)]
    started = time.monotonic()
    code = run_container(RunSpec(f"{repository}:{cell.pair.key}", tuple(args), run_root), log=log)
    seconds = time.monotonic() - started
    summary_file = run_root / cell.name / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else None
    return CellResult(cell, code, seconds, summary, _problem(cell, code, summary))


def _problem(cell: Cell, code: int, summary: dict | None) -> str:
    if code != 0:
        return f"exit {code}"
    if summary is None:
        return "no summary.json"
    if (summary.get("torch"), summary.get("torch_xla")) != (cell.pair.torch, cell.pair.torch_xla):
        return f"ran torch {summary.get('torch')}/{summary.get('torch_xla')}, not the pair's"
    if summary.get("devices") != int(cell.cores):
        return f"used {summary.get('devices')} devices"
    if summary.get("val_accuracy", 0.0) < MIN_VAL_ACCURACY:
        return f"val_accuracy < {MIN_VAL_ACCURACY}"
    if summary.get("compiles_after_first_epoch") != 0:
        return "recompiled after epoch 1"
    return ""


def table(results: list[CellResult]) -> str:
    """A fixed-width pass/fail table, one row per cell."""
    head = f"{'pair':<5} {'cores':>5} {'precision':<9} {'val_acc':>7} {'compiles>1':>10} {'secs':>5}  result"
    rows = [head, "-" * len(head)]
    for r in results:
        s = r.summary or {}
        acc = f"{s['val_accuracy']:.4f}" if isinstance(s.get("val_accuracy"), (int, float)) else "-"
        compiles = str(s.get("compiles_after_first_epoch", "-"))
        verdict = "PASS" if r.passed else f"FAIL ({r.problem})"
        rows.append(f"{r.cell.pair.key:<5} {r.cell.cores:>5} {r.cell.precision:<9} {acc:>7} "
                    f"{compiles:>10} {r.seconds:>5.0f}  {verdict}")
    return "\n".join(rows)
