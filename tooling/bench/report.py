"""Run the whole benchmark and write RUN_DIR/bench.md and RUN_DIR/bench.json."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from tooling.bench.wall import REPO, wall_rounds
from tooling.bench.workloads import WORKLOADS

# The step at the hand loop's speed or better (the step issue's goal), whatever the engine adds around it.
GOALS = {"step_ratio": 1.00, "compiles_after_warmup": 0, "host_reads": 0, "wall_ratio": 1.10}


def _median_spread(values: list[float]) -> tuple[float, float]:
    """The median and the per-round spread (max - min) as a fraction of the median."""
    median = statistics.median(values)
    return median, (max(values) - min(values)) / median if median else 0.0


def run_bench(out_dir: Path, workloads: list[str], devices: list[int], rounds: int, epochs: int,
              wall_rounds_count: int) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in workloads:
        workload = WORKLOADS[name]
        for count in (d for d in devices if d in workload.devices):
            raw_file = out_dir / f"rounds-{name}-{count}.json"
            env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
            subprocess.run([sys.executable, "-m", "tooling.bench.rounds", "--devices", str(count), "--workload", name,
                            "--rounds", str(rounds), "--epochs", str(epochs), "--out", str(raw_file)],
                           cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
            raw = json.loads(raw_file.read_text())["rounds"]
            walls = wall_rounds(workload.engine_module, name, count, epochs, wall_rounds_count, workload.engine_flags())
            rows.append(_row(name, count, raw, walls))
    result = {"when": datetime.now().isoformat(timespec="seconds"), "rounds": rounds, "epochs": epochs,
              "goals": GOALS, "rows": rows}
    (out_dir / "bench.json").write_text(json.dumps(result, indent=2))
    (out_dir / "bench.md").write_text(markdown(result))
    return result


def _row(name: str, devices: int, raw: dict, walls: dict) -> dict:
    row: dict = {"workload": name, "devices": devices, "sides": list(raw)}
    for lead, side in enumerate(raw):  # rounds rotate the sides: round `lead` is the one this side led
        rounds = raw[side]
        step, spread = _median_spread([r["step_seconds"] for r in rounds])
        row[side] = {
            "step_ms": round(step * 1e3, 3), "step_spread": round(spread, 3),
            "per_round_step_ms": [round(r["step_seconds"] * 1e3, 3) for r in rounds],
            "execute_ms_per_step": round(statistics.median(r["execute_seconds_per_step"] for r in rounds) * 1e3, 3),
            "compiles_after_warmup": max(r["compiles_after_warmup"] for r in rounds),
            "host_reads_per_step_outside_logging": round(max(r["host_reads_per_step_outside_logging"] for r in rounds), 3),
            # the round where this side ran first, i.e. compiled its graphs in this process
            "first_step_s": round(rounds[min(lead, len(rounds) - 1)]["first_step_seconds"], 3),
        }
        if side in walls:  # process wall time: the engine's CLI and the plain script only
            row[side].update(wall_s=round(statistics.median(walls[side]), 2),
                             per_round_wall_s=[round(w, 2) for w in walls[side]])
    for side in raw:
        if side != "plain":
            row[side]["step_ratio"] = round(row[side]["step_ms"] / row["plain"]["step_ms"], 3)
    row["step_ratio"] = row["engine"]["step_ratio"]
    row["wall_ratio"] = round(row["engine"]["wall_s"] / row["plain"]["wall_s"], 3)
    return row


def markdown(result: dict) -> str:
    head = ("| workload | devices | side | wall ms/step (median) | spread | device execute ms/step | "
            "compiles after warm-up | host reads/step outside logging | time to first step s | "
            "process wall s (median) | step ratio | wall ratio |")
    lines = [f"# invoke bench ({result['when']}; {result['rounds']} interleaved rounds, {result['epochs']} epochs)",
             "", f"Goals: step ratio <= {GOALS['step_ratio']}, wall ratio <= {GOALS['wall_ratio']}, "
             "0 compiles after warm-up, 0 host reads per step outside logging.", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for row in result["rows"]:
        for side in row.get("sides", ("engine", "plain")):
            s = row[side]
            ratios = f"{s.get('step_ratio', '')} | {row['wall_ratio'] if side == 'engine' else ''}"
            lines.append(f"| {row['workload']} | {row['devices']} | {side} | {s['step_ms']} | {s['step_spread']:.1%} | "
                         f"{s['execute_ms_per_step']} | {s['compiles_after_warmup']} | "
                         f"{s['host_reads_per_step_outside_logging']} | {s['first_step_s']} | {s.get('wall_s', '')} | "
                         f"{ratios} |")
    lines += ["", "Per-round wall ms/step and process seconds are in bench.json."]
    return "\n".join(lines) + "\n"
