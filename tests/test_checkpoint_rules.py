"""When a fit checkpoints (`Checkpointer`'s due-rules and reasons), without XLA.

    .venv/bin/python -m pytest tests/test_checkpoint_rules.py     # about a second
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainer.checkpoint.checkpointer import Checkpointer
from trainer.config import CheckpointConfig
from trainer.errors import UserError

ONE_HOST = SimpleNamespace(process_count=1, device="cpu")


def _checkpointer(**config) -> Checkpointer:
    return Checkpointer(CheckpointConfig(**config), store=None, job={}, runtime=ONE_HOST)


def test_every_n_steps_is_due_inside_an_epoch_only():
    rules = _checkpointer(every_n_steps=5)
    due = [step for step in range(1, 21) if rules.due_after_step(step, batches_done=step, epoch_len=20)]
    assert due == [5, 10, 15]  # step 20 ends the epoch: the epoch's own checkpoint covers it
    assert not any(_checkpointer(every_n_steps=0).due_after_step(s, s, 20) for s in range(1, 21))


@pytest.mark.parametrize("every, expected", [(1, [1, 2, 3, 4, 5, 6]), (2, [2, 4, 6]), (0, [])])
def test_every_n_epochs(every, expected):
    rules = _checkpointer(every_n_epochs=every)
    assert [e for e in range(1, 7) if rules.due_after_epoch(e)] == expected


def test_the_reason_at_an_epochs_end():
    rules = _checkpointer(every_n_epochs=2)
    assert rules.reason_at_epoch_end(1, last=False, stop_requested=False) is None
    assert rules.reason_at_epoch_end(2, last=False, stop_requested=False) == "epoch"
    assert rules.reason_at_epoch_end(3, last=True, stop_requested=False) == "final"  # the last epoch always saves
    assert rules.reason_at_epoch_end(1, last=False, stop_requested=True) == "preempted"
    assert rules.reason_at_epoch_end(3, last=True, stop_requested=True) == "preempted"
    assert _checkpointer(every_n_epochs=0).reason_at_epoch_end(5, last=True, stop_requested=False) == "final"


def test_sharded_checkpoints_across_hosts_are_refused_with_the_fix():
    with pytest.raises(UserError, match="sharded \\(FSDP\\) checkpoints across 2 hosts are not supported"):
        Checkpointer(CheckpointConfig(), None, {}, SimpleNamespace(process_count=2), sharded=True)
