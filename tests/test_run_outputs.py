"""A resumed run's files (`RunOutputs`): rows logged after the checkpoint are dropped and
redone, completed epochs are kept; without XLA.

    .venv/bin/python -m pytest tests/test_run_outputs.py     # about a second
"""
from __future__ import annotations

import csv

from trainer.outputs.run_outputs import RunOutputs


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _first_run(path, steps: int, epochs: int) -> None:
    outputs = RunOutputs(path)
    for step in range(1, steps + 1):
        outputs.log_step(step, 1 + (step - 1) // 10, {"loss": 1.0 / step, "lr": 0.1})
    for epoch in range(1, epochs + 1):
        outputs.log_epoch({"epoch": epoch, "global_step": 10 * epoch, "train_loss": 0.5, "compiles": 0,
                           "epoch_seconds": 1.0, "samples_per_second": 1.0})
    outputs.close()


def test_a_resume_drops_the_steps_logged_after_its_checkpoint_and_appends(tmp_path):
    _first_run(tmp_path, steps=27, epochs=2)  # killed at step 27, checkpoint at step 20 (end of epoch 2)
    resumed = RunOutputs(tmp_path, resume_step=20, completed_epochs=2)
    assert [int(r["global_step"]) for r in _rows(tmp_path / "steps.csv")] == list(range(1, 21))
    resumed.log_step(21, 3, {"loss": 0.25, "lr": 0.1})
    resumed.close()
    rows = _rows(tmp_path / "steps.csv")
    assert [int(r["global_step"]) for r in rows] == list(range(1, 22)) and rows[-1]["loss"] == "0.25"
    assert [int(r["epoch"]) for r in resumed.history] == [1, 2]


def test_a_resume_mid_epoch_keeps_only_the_completed_epochs(tmp_path):
    _first_run(tmp_path, steps=30, epochs=3)
    resumed = RunOutputs(tmp_path, resume_step=25, completed_epochs=2)
    assert [int(r["epoch"]) for r in resumed.history] == [1, 2]
    assert int(_rows(tmp_path / "steps.csv")[-1]["global_step"]) == 25
    resumed.close()


def test_a_fresh_run_starts_the_files_anew(tmp_path):  # negative control: no resume, nothing kept
    _first_run(tmp_path, steps=12, epochs=1)
    fresh = RunOutputs(tmp_path)
    fresh.close()
    assert _rows(tmp_path / "steps.csv") == [] and fresh.history == []
