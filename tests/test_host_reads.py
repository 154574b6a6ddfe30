"""The host-read tracker's accounting, without XLA: the engine's asynchronous `.item()` is
never blamed on a step, even when its two counters land in different windows.

    .venv/bin/python -m pytest tests/test_host_reads.py
"""
from trainer.diagnostics.host_reads import HostReadTracker


def test_a_logging_read_split_across_a_gap_and_the_next_window_is_not_the_users():
    reads = HostReadTracker()
    assert reads.window(1, host_reads=0, scalar_reads=0, is_logging_step=True) is None  # read scheduled
    reads.gap(scalar_reads=1, host_reads=0)  # the closure's .item() counted its scalar half here...
    assert reads.window(2, host_reads=1, scalar_reads=0, is_logging_step=False) is None  # ...its copy here
    assert reads.user_reads == 0


def test_the_engines_own_reads_between_steps_are_not_the_users():
    reads = HostReadTracker()
    reads.window(1, host_reads=0, scalar_reads=0, is_logging_step=False)
    reads.gap(scalar_reads=0, host_reads=3)  # epoch sums, validation, a checkpoint
    assert reads.window(2, host_reads=0, scalar_reads=0, is_logging_step=False) is None
    assert reads.user_reads == 0


def test_a_copy_and_an_item_inside_a_step_are_the_users():  # negative control for the two above
    reads = HostReadTracker()
    named = reads.window(1, host_reads=1, scalar_reads=0, is_logging_step=False)  # a .cpu() in the step
    assert named is not None and named.host_reads == 1
    named = reads.window(2, host_reads=1, scalar_reads=1, is_logging_step=False)  # an .item() in the step
    assert named is not None and named.scalar_reads == 1
    assert reads.user_reads == 2
