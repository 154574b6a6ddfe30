"""Run directories written before the manifests were renamed still resume and reproduce.

Today's names: RUN_DIR/run.json (what produced the run) and RUN_DIR/checkpoints/index.json
(which checkpoints count). Runs written before 2026-11 named both manifest.json.

    .venv/bin/python -m pytest tests/test_legacy_run_dirs.py     # about a minute (two short CLI runs)
"""
from __future__ import annotations

import json
import shutil

import pytest

from tooling.reproduce import read_manifest
from trainer.checkpoint.index import INDEX, LEGACY_INDEX
from trainer.checkpoint.store import CheckpointStore
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST
from trainer.outputs.run_manifest import LEGACY_FILE

ARGS = ("train", "--no-progress", "--env-profile", "cpu", "--log-every-n-steps", "5")


def _as_written_before_the_rename(run_dir) -> None:
    (run_dir / RUN_MANIFEST).rename(run_dir / LEGACY_FILE)
    (run_dir / "checkpoints" / INDEX).rename(run_dir / "checkpoints" / LEGACY_INDEX)


@pytest.mark.slow
def test_an_old_run_directory_resumes_and_moves_to_the_new_names(cli, tmp_path):
    reference = cli(*ARGS, "--max-epochs", "3", run_dir=tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr[-3000:]
    old = tmp_path / "old"
    first = cli(*ARGS, "--max-epochs", "2", run_dir=old)
    assert first.returncode == 0, first.stderr[-3000:]
    _as_written_before_the_rename(old)
    assert [e["file"] for e in CheckpointStore(old / "checkpoints").entries()] == ["step-00000023.ckpt",
                                                                                  "final.ckpt"]  # read as is
    resumed = cli(*ARGS, "--max-epochs", "3", "--resume", "auto", run_dir=old)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr and "final.ckpt" in resumed.stderr
    assert not (old / LEGACY_FILE).exists() and not (old / "checkpoints" / LEGACY_INDEX).exists()
    run = json.loads((old / RUN_MANIFEST).read_text())
    assert len(run["resumes"]) == 1 and run["job"]["trainer"]["max_epochs"] == 2  # the old record, carried over
    assert (old / "steps.csv").read_text() == (tmp_path / "reference" / "steps.csv").read_text()


def test_invoke_reproduce_reads_an_old_run_manifest(tmp_path):
    (tmp_path / LEGACY_FILE).write_text(json.dumps({"format": 1, "job": {"trainer": {}}, "resumes": []}))
    assert read_manifest(tmp_path)["format"] == 1
    shutil.copy(tmp_path / LEGACY_FILE, tmp_path / RUN_MANIFEST)
    (tmp_path / RUN_MANIFEST).write_text(json.dumps({"format": 1, "job": {}, "resumes": [], "new": True}))
    assert read_manifest(tmp_path)["new"]  # the current name wins when both exist
