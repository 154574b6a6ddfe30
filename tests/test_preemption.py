"""Preemption signals: a second signal while the checkpoint is being written.

`pytest tests/test_preemption.py` (about 30 s). The SIGTERM/SIGINT exact-resume scenarios
are in test_resume.py; here a 256 MB checkpoint keeps the save busy long enough to hit it
with a second SIGTERM and a SIGINT, and the checkpoint must still commit and verify.
"""
from __future__ import annotations

import signal

import pytest

from checkpoint_helpers import BIG, finish, start, text, train_argv, wait_for
from trainer.outputs.atomic_files import TMP_PREFIX
from trainer.checkpoint.store import CheckpointStore
from trainer.fit.preemption import EXIT_CODES

pytestmark = pytest.mark.slow


def test_exit_codes_are_128_plus_the_signal():
    assert EXIT_CODES == {signal.SIGTERM: 143, signal.SIGINT: 130}


def test_signals_during_the_checkpoint_write_do_not_corrupt_it(tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    log = tmp_path / "train.log"
    args = ["--set", "module_args.megabytes=256", "--set", "module_args.step_sleep=0.05",
            "--set", "checkpoint.every_n_epochs=0"]  # the only checkpoint is the one SIGTERM asks for
    proc = start(train_argv(run_dir, *args, module="tests.helpers_modules:Big", epochs=2), log)
    wait_for(lambda: "epoch 1/2" in text(log), "the end of epoch 1", proc)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: bool(list(checkpoints.glob(TMP_PREFIX + "*"))), "the checkpoint write to begin", proc, poll=0.005)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    assert finish(proc) == 143, text(log)[-3000:]
    out = text(log)
    assert "SIGTERM received: finishing the current step" in out
    assert "received again: already stopping" in out
    store = CheckpointStore(checkpoints)
    entry, = store.entries()
    assert entry["reason"] == "preempted"
    loaded, problems = store.newest_valid()
    assert loaded.path.name == entry["file"] and problems == []
    assert loaded.state["module"]["ballast"].numel() == 256 * 2**18
    assert not list(checkpoints.glob(TMP_PREFIX + "*"))
