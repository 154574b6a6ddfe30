"""The step counter and accumulation windows (`trainer.fit.progress`), without XLA.

    .venv/bin/python -m pytest tests/test_progress.py     # well under a second
"""
from __future__ import annotations

import pytest

from trainer.fit.progress import Progress, validation_every


def _walk(progress: Progress, epoch: int, epoch_len: int) -> list[tuple[int, bool, int]]:
    """Drive one epoch the way the loop does: (batch index, optimizer stepped, global step after)."""
    progress.start_epoch(epoch, epoch_len)
    seen = []
    for _ in range(progress.batch, epoch_len):
        index = progress.batch
        steps = progress.window_ends_at(index)
        progress.batch_done(steps)
        seen.append((index, steps, progress.global_step))
        if steps and progress.done:
            break
    return seen


def test_windows_of_an_epoch_that_accumulate_does_not_divide():
    progress = Progress(max_epochs=1, log_every_n_steps=1, accumulate=4)
    progress.start_epoch(1, 10)
    assert [progress.window_of(i) for i in (0, 3, 4, 9)] == [range(0, 4), range(0, 4), range(4, 8), range(8, 10)]
    assert [i for i in range(10) if progress.window_ends_at(i)] == [3, 7, 9]  # the last window is short


def test_a_batch_is_not_a_step_with_accumulation():
    progress = Progress(max_epochs=2, log_every_n_steps=1, accumulate=3)
    first = _walk(progress, 1, 7)
    assert [s for _, s, _ in first] == [False, False, True, False, False, True, True]
    assert progress.global_step == 3 and progress.position == (1, 7)
    progress.end_epoch()
    assert progress.position == (2, 0)
    _walk(progress, 2, 7)
    assert progress.global_step == 6


def test_max_steps_stops_mid_epoch_and_counts_optimizer_steps():
    progress = Progress(max_epochs=5, log_every_n_steps=1, accumulate=2, max_steps=3)
    seen = _walk(progress, 1, 10)
    assert progress.done and progress.global_step == 3 and progress.batch == 6 and len(seen) == 6
    assert list(progress.epochs()) == []  # nothing left to run


def test_without_max_steps_the_run_is_never_done():
    progress = Progress(max_epochs=2, log_every_n_steps=1)
    _walk(progress, 1, 50)
    assert not progress.done and list(progress.epochs()) == [1, 2]


def test_logging_and_validation_steps():
    progress = Progress(max_epochs=1, log_every_n_steps=4, val_every=3)
    progress.start_epoch(1, 9)
    logged, validated = [], []
    for _ in range(9):
        progress.batch_done(True)
        logged += [progress.global_step] if progress.logging_step else []
        validated += [progress.global_step] if progress.validation_due else []
    assert logged == [4, 8]
    assert validated == [3, 6]  # never at the epoch's last batch: the epoch's end validates anyway


def test_a_resumed_counter_skips_the_done_batches_of_its_first_epoch_only():
    fresh = Progress(max_epochs=3, log_every_n_steps=5, accumulate=2, max_steps=-1, val_every=4)
    resumed = fresh.resumed(epoch=2, batch=6, global_step=13)
    assert (resumed.accumulate, resumed.val_every, resumed.log_every_n_steps) == (2, 4, 5)
    assert list(resumed.epochs()) == [2, 3]
    assert resumed.start_epoch(2, 10) == 6 and resumed.position == (2, 6)
    _walk(resumed, 2, 10)
    assert resumed.global_step == 15  # batches 6..9: two more windows
    resumed.end_epoch()
    assert resumed.start_epoch(3, 10) == 0


@pytest.mark.parametrize("interval, batches, accumulate, expected", [
    (1.0, 10, 1, 0), (0.5, 10, 1, 5), (0.25, 10, 2, 1), (0.5, 9, 2, 2), (0.01, 10, 1, 1), (7, 10, 1, 7),
])
def test_val_check_interval_in_optimizer_steps(interval, batches, accumulate, expected):
    assert validation_every(interval, batches, accumulate) == expected
