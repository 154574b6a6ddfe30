"""RUN_DIR/run.json: what produced this run, enough to run it again.

Recorded once at the start (and extended at each resume): the command, the resolved
job config (the exact input `tpu-trainer train --config` accepts), the seed, the torch /
torch_xla / Python / NumPy versions, the image tag and digest when run inside our image
(`TPU_TRAINER_IMAGE` set by the Dockerfile, `TPU_TRAINER_IMAGE_DIGEST` by `invoke run`), the git
revision and dirty flag of the engine's source when it is a git checkout (else null),
the environment profile with every XLA/PJRT variable set, and host and device counts.
`invoke reproduce RUN_DIR` reads it; it is data, never code. Runs written before it had its
own name kept it as RUN_DIR/manifest.json (beside checkpoints/manifest.json, now
checkpoints/index.json): it is still read, and a resume carries it over to run.json.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainer.runtime import env_vars
from trainer.outputs.atomic_files import write_json_atomic

FILE = "run.json"
LEGACY_FILE = "manifest.json"
"""The run manifest's name before 2026-11 (read, never written)."""
FORMAT = 1


def git_state(source: Path | None = None) -> dict | None:
    """{"revision", "dirty"} of the checkout holding the engine's code, or None if not one."""
    source = source or Path(__file__).resolve().parents[2]
    try:
        revision = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"revision": revision, "dirty": bool(status.strip())}


def image_state(environ: Any = os.environ) -> dict | None:
    tag = environ.get(env_vars.TPU_TRAINER_IMAGE)
    if not tag:
        return None
    return {"tag": tag, "digest": environ.get(env_vars.TPU_TRAINER_IMAGE_DIGEST) or None}


def describe_process(runtime: Any) -> dict:
    """The facts of this process that decide what a run computes."""
    import numpy

    return {
        "command": [sys.executable, *sys.argv],
        "versions": {"python": platform.python_version(), "torch": runtime.torch_version,
                     "torch_xla": runtime.xla_version, "numpy": numpy.__version__},
        "image": image_state(),
        "git": git_state(),
        "xla_environment": {k: os.environ[k] for k in env_vars.XLA_RUNTIME if k in os.environ},
        "host_count": runtime.process_count,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def resolved_config(job: Any, plan: Any, runtime: Any, run_dir: Path | None, run_url: str | None = None,
                    seeding: Any = None) -> dict:
    """config.yaml: the job as run (the exact input `--config` accepts) plus what was resolved from it."""
    resolved = job.to_dict()
    resolved["trainer"]["run_dir"] = run_url or (str(run_dir) if run_dir else "")
    resolved["trainer"]["env_profile"] = plan.profile.name
    resolved["resolved"] = {
        "devices": plan.selection.count,
        "device_index": plan.selection.index,
        "host_devices": plan.host_devices,
        "spmd": plan.selection.spmd,
        "mesh": plan.parallel.mesh.describe() if plan.parallel.mesh else None,
        "process_count": runtime.process_count,
        "environment": dict(plan.env),
        "torch": runtime.torch_version,
        "torch_xla": runtime.xla_version,
        **_seed(job.trainer.seed, seeding),
    }
    return resolved


def _seed(asked: Any, seeding: Any) -> dict:
    """The seed the run ran with and where it came from (trainer.seed, PL_GLOBAL_SEED, torch.initial_seed)."""
    if seeding is None:
        return {"seed": asked, "seed_source": "trainer.seed"}
    return {"seed": seeding.seed, "seed_source": seeding.source}


def write_run_manifest(run_dir: Path, job: dict, plan: Any, runtime: Any, seeding: Any = None) -> None:
    """A fresh run's manifest (replaces any left by a run that never checkpointed)."""
    manifest = {
        "format": FORMAT,
        "job": job,
        **_seed(job["trainer"]["seed"], seeding),
        "env_profile": plan.profile.name,
        "device_count": plan.selection.count,
        **describe_process(runtime),
        "resumes": [],
    }
    write_json_atomic(manifest, run_dir / FILE)


def record_resume(run_dir: Path, job: dict, plan: Any, runtime: Any, checkpoint: Path, sha256: str,
                  global_step: int) -> None:
    """Append where this process resumed from (and how it differs) to the run's manifest."""
    path = run_dir / FILE
    if not path.exists() and (run_dir / LEGACY_FILE).exists():  # an older run: carried over under the new name
        write_json_atomic(json.loads((run_dir / LEGACY_FILE).read_text()), path)
        (run_dir / LEGACY_FILE).unlink()
    if not path.exists():  # resumed into a new directory: this process's facts open it
        write_run_manifest(run_dir, job, plan, runtime)
    manifest = json.loads(path.read_text())
    manifest.setdefault("resumes", []).append({
        "checkpoint": str(checkpoint), "sha256": sha256, "global_step": global_step,
        "job": job, "env_profile": plan.profile.name, "device_count": plan.selection.count,
        **describe_process(runtime),
    })
    write_json_atomic(manifest, path)


def read_run_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / FILE
    return json.loads((path if path.exists() else Path(run_dir) / LEGACY_FILE).read_text())
