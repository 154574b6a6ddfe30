"""`invoke reproduce RUN_DIR`: run a finished job again and say whether its losses match.

Reads RUN_DIR/run.json (written by the engine; manifest.json in older runs), writes the recorded job as a YAML,
and runs it from scratch, uninterrupted, through the engine's CLI: inside the recorded
image when the run was made in one (by digest when recorded, else by tag), otherwise
with this Python. Then compares steps.csv row by row: global step, epoch and the exact
`repr` of every logged loss. A run that was preempted and resumed is compared with an
uninterrupted one, which is exactly the claim that resuming is exact.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tooling.errors import ToolingError


@dataclass(frozen=True)
class Comparison:
    original: int
    """Logged steps in the original run."""
    reproduced: int
    first_difference: tuple | None
    """(original row, reproduced row) of the first mismatch, or None."""

    @property
    def equal(self) -> bool:
        return self.first_difference is None and self.original == self.reproduced

    def describe(self) -> str:
        if self.equal:
            return f"losses match: {self.original} logged steps, bitwise identical"
        if self.first_difference:
            a, b = self.first_difference
            return f"losses differ: first at step {a[0] if a else b[0]}: original {a} vs reproduced {b}"
        return f"losses differ in length: original {self.original} rows, reproduced {self.reproduced}"


RUN_MANIFESTS = ("run.json", "manifest.json")
"""The engine's run manifest, and its name in runs written before 2026-11."""


def read_manifest(run_dir: Path) -> dict:
    path = next((run_dir / name for name in RUN_MANIFESTS if (run_dir / name).exists()), run_dir / RUN_MANIFESTS[0])
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ToolingError(f"{path} does not exist: {run_dir} is not a tpu-trainer run directory "
                           "(or it predates run manifests). Fix: pass the RUN_DIR of a run.") from None


def job_for_reproduction(manifest: dict) -> dict:
    """The job that finished the run (the last resume's, e.g. with more epochs), to run from
    scratch: no resume, its own new run dir, no progress bar, the recorded profile."""
    last = (manifest.get("resumes") or [manifest])[-1]
    job = json.loads(json.dumps(last["job"]))
    job["trainer"].update(run_dir="", resume="", progress_bar=False, env_profile=last["env_profile"])
    if job["trainer"].get("seed") is None and manifest.get("seed") is not None:
        job["trainer"]["seed"] = manifest["seed"]  # the seed it ran with (PL_GLOBAL_SEED, torch's own)
    return job


def steps(path: Path) -> list[tuple[str, str, str]]:
    with open(path, newline="") as f:
        return [(r["global_step"], r["epoch"], r["loss"]) for r in csv.DictReader(f)]


def compare(original: Path, reproduced: Path) -> Comparison:
    a, b = steps(original), steps(reproduced)
    first = next(((x, y) for x, y in zip(a, b) if x != y), None)
    if first is None and len(a) != len(b):
        longer = a if len(a) > len(b) else b
        extra = longer[min(len(a), len(b))]
        first = (extra, None) if longer is a else (None, extra)
    return Comparison(original=len(a), reproduced=len(b), first_difference=first)


def reproduce(run_dir: Path, out_root: Path, log=print) -> Comparison:
    """Re-run the job of `run_dir` into a new directory under `out_root`; compare steps.csv."""
    manifest = read_manifest(run_dir)
    job = job_for_reproduction(manifest)
    out_root.mkdir(parents=True, exist_ok=True)
    name = f"reproduce-{time.strftime('%Y%m%d-%H%M%S')}-{run_dir.resolve().name}"
    job_file = out_root / f"{name}.job.yaml"
    job_file.write_text(yaml.safe_dump(job, sort_keys=False))
    image = manifest.get("image")
    if image:
        from tooling.docker.container import RUNS_IN_CONTAINER, RunSpec, run_container

        reference = image.get("digest") or image["tag"]
        log(f"re-running {run_dir} in image {reference} (recorded tag {image['tag']})")
        args = ("train", "--config", f"{RUNS_IN_CONTAINER}/{job_file.name}", "--run-dir", f"{RUNS_IN_CONTAINER}/{name}")
        code = run_container(RunSpec(reference, args, out_root), log=log)
    else:
        command = [sys.executable, "-m", "trainer", "train", "--config", str(job_file), "--run-dir", str(out_root / name)]
        log(f"re-running {run_dir} locally (it was not run in an image): {' '.join(command)}")
        code = subprocess.run(command).returncode
    if code != 0:
        raise ToolingError(f"the reproduction run exited with code {code}; see its output above.")
    return compare(run_dir / "steps.csv", out_root / name / "steps.csv")
