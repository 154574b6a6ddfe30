"""Where a fit writes, decided in one place: a new local run, a resumed one, or gs://.

    connect_remote   before any XLA work: a gs:// run directory's bucket must take writes
    open_run         the directory this fit writes (a gs:// run: its local staging copy),
                     the checkpoint it resumes from, and the opened outputs and store

Only the process that writes shared outputs (process 0) opens files; every process
learns which checkpoint it resumes from.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.checkpoint.index import CHECKPOINT_DIR
from trainer.checkpoint.resume import find_resume, run_dir_for
from trainer.checkpoint.store import CheckpointStore
from trainer.checkpoint.verify import Loaded
from trainer.outputs.run_manifest import record_resume, resolved_config, write_run_manifest
from trainer.outputs.run_outputs import RunOutputs, default_run_dir, prepare_run_dir
from trainer.storage.location import is_remote

log = logging.getLogger(__name__)


def connect_remote(run_dir: str, said: str) -> Any:
    """A connected `trainer.storage.mirror.RunMirror` for a gs:// run directory, else None.

    `said`: the setting as the user wrote it, for the UserError of a bucket that cannot be written."""
    if not is_remote(run_dir):
        return None
    from trainer.storage.mirror import RunMirror  # gcsfs only for gs:// runs

    return RunMirror.connect(run_dir, said)


@dataclass
class RunPlace:
    """The opened run directory of one fit."""

    path: Path | None
    """Where this process writes (a gs:// run: its staging copy); None on processes other than 0."""
    url: str | None
    """The gs:// run directory the files are published to (None for a local run)."""
    outputs: RunOutputs
    store: CheckpointStore | None
    resumed: Loaded | None
    """The verified checkpoint this fit continues from (None: a fresh start)."""


def open_run(job: Any, plan: Any, runtime: Any, mirror: Any, seeding: Any = None,
             hyper_parameters: dict | None = None) -> RunPlace:
    """Resolve, check and open the run directory; record a fresh run or a resume in its manifest.

    `seeding`: the run's `trainer.runtime.seeding.Seeding` (the seed it runs with, and where it came from);
    `hyper_parameters`: what the module's save_hyperparameters() recorded (into config.yaml)."""
    cfg, job_dict = job.trainer, job.to_dict()
    configured, url = cfg.run_dir, None
    if mirror is not None:  # the engine writes the staging copy; the mirror publishes it
        configured = str(mirror.prepare(resuming=bool(cfg.resume), owner=runtime.is_global_zero))
        url = mirror.remote.url
        mirror.capture_worker_log(runtime.process_index)
    run_dir = run_dir_for(cfg.resume, configured) or default_run_dir(configured, job.name, cfg.runs_root)
    resumed = find_resume(cfg.resume, run_dir)
    if not runtime.is_global_zero:
        return RunPlace(None, url, RunOutputs.disabled(), None, resumed)
    # A gs:// run's staging copy was emptied or refilled by `prepare`, which refused a bucket
    # path holding another run; the local check would only see the worker log just opened.
    path = prepare_run_dir(run_dir, resuming=bool(cfg.resume) or mirror is not None)
    store = CheckpointStore(path / CHECKPOINT_DIR, job.checkpoint.keep_last)
    store.start()
    if resumed is None:
        outputs = RunOutputs(path)
        write_run_manifest(path, job_dict, plan, runtime, seeding)
    else:
        state = resumed.state
        warn_config_changes(state.get("config", {}), job_dict)
        outputs = RunOutputs(path, resume_step=state["global_step"], completed_epochs=state["epoch"])
        record_resume(path, job_dict, plan, runtime, resumed.path, resumed.sha256, state["global_step"])
        log.info("resuming from %s: step %d, epoch %d, batch %d", resumed.path, state["global_step"],
                 state["position"]["epoch"], state["position"]["batch"])
    config = resolved_config(job, plan, runtime, path, url, seeding)
    if hyper_parameters:
        config["resolved"]["hyper_parameters"] = hyper_parameters
    outputs.write_config(config)
    log.info("run directory: %s", url or path)
    return RunPlace(path, url, outputs, store, resumed)


def warn_config_changes(saved: dict, now: dict,
                        allowed: tuple = ("max_epochs", "resume", "run_dir", "progress_bar")) -> None:
    """A resumed run is only exact with the same job; say which keys differ (extending max_epochs is fine)."""
    changed = []
    for section in sorted((set(saved) | set(now)) - {"checkpoint", "diagnostics"}):  # neither changes a loss
        old, new = saved.get(section), now.get(section)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += [f"{section}.{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                        if old.get(k) != new.get(k) and k not in allowed]
        elif old != new:
            changed.append(f"{section}: {old!r} -> {new!r}")
    if changed:
        log.warning("the resumed job differs from the checkpoint's (the losses will not match an "
                    "uninterrupted run): %s", "; ".join(changed))
