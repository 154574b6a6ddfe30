"""Crashes around checkpoint writes, with real training processes.

`pytest tests/test_checkpoint_crash.py` (about a minute). SIGKILL in the middle of writing
a 256 MB checkpoint; a damaged newest checkpoint met by `--resume auto` and by an
explicit `--resume PATH`; and a disk that really fills up (a 3 MiB tmpfs; needs root to
mount, skipped otherwise; the in-process ENOSPC injection is in test_checkpoint.py).
"""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from checkpoint_helpers import BIG, finish, run, start, steps, text, train_argv, wait_for
from trainer.outputs.atomic_files import TMP_PREFIX
from trainer.checkpoint.store import CheckpointStore
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST

pytestmark = pytest.mark.slow

BIG_ARGS = ["--set", "module_args.megabytes=256", "--set", "module_args.step_sleep=0.05",
            "--set", "checkpoint.every_n_steps=5", "--set", "checkpoint.keep_last=2"]


def _temporaries(directory):
    return sorted(directory.glob(TMP_PREFIX + "*")) if directory.is_dir() else []


def test_sigkill_while_writing_a_large_checkpoint_keeps_the_previous_one_and_resume_auto_continues(tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    store = CheckpointStore(checkpoints)
    proc = start(train_argv(run_dir, *BIG_ARGS, module=BIG, epochs=1), tmp_path / "killed.log")
    wait_for(lambda: bool(store.entries()) and bool(_temporaries(checkpoints)),
             "a second checkpoint being written after a committed one", proc, timeout=180, poll=0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    assert finish(proc) == -signal.SIGKILL
    assert _temporaries(checkpoints), "the kill was meant to land mid-write"
    committed = store.entries()[-1]

    loaded, problems = store.newest_valid()  # the previous checkpoint is whole and verifies
    assert loaded.path.name == committed["file"] and loaded.state["global_step"] == committed["global_step"]
    assert not [p for p in problems if "sha256" in p or "bytes" in p]

    code = run(train_argv(run_dir, *BIG_ARGS, "--set", "checkpoint.every_n_steps=0", "--resume", "auto",
                          module=BIG, epochs=1), tmp_path / "resumed.log")
    log = text(tmp_path / "resumed.log")
    assert code == 0, log[-3000:]
    assert "unfinished checkpoint temporaries" in log and not _temporaries(checkpoints)
    assert f"resuming from {checkpoints / committed['file']}" in log
    assert [s for s, _, _ in steps(run_dir)] == list(range(1, 24))  # no step lost, none twice


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One epoch of the digits MLP with a checkpoint every 5 steps (the tests below read it in order)."""
    tmp_path = tmp_path_factory.mktemp("finished")
    run_dir = tmp_path / "run"
    args = ["--set", "checkpoint.every_n_steps=5", "--set", "checkpoint.keep_last=2"]
    assert run(train_argv(run_dir, *args, epochs=1), tmp_path / "first.log") == 0, text(tmp_path / "first.log")[-3000:]
    assert [e["file"] for e in CheckpointStore(run_dir / "checkpoints").entries()] == [
        "step-00000015.ckpt", "step-00000020.ckpt", "final.ckpt"]
    return run_dir, args


def test_resume_from_a_path_into_a_new_run_dir_records_where_it_came_from(finished_run, tmp_path):
    import json

    run_dir, args = finished_run
    source = run_dir / "checkpoints" / "step-00000020.ckpt"
    new_dir = tmp_path / "continued"
    assert run(train_argv(new_dir, *args, "--resume", str(source), epochs=1), tmp_path / "path.log") == 0, \
        text(tmp_path / "path.log")[-3000:]
    assert steps(new_dir) == steps(run_dir)[20:]  # steps 21..23, bitwise the original's
    resume, = json.loads((new_dir / RUN_MANIFEST).read_text())["resumes"]
    assert resume["checkpoint"] == str(source) and resume["global_step"] == 20


def test_a_corrupted_newest_checkpoint_is_reported_and_resume_uses_the_previous_or_refuses(finished_run, tmp_path):
    run_dir, args = finished_run
    final = run_dir / "checkpoints" / "final.ckpt"
    data = bytearray(final.read_bytes())
    data[len(data) // 2] ^= 0xFF
    final.write_bytes(bytes(data))

    explicit = start(train_argv(tmp_path / "explicit", *args, "--resume", str(final), epochs=2), tmp_path / "explicit.log")
    auto = start(train_argv(run_dir, *args, "--resume", "auto", epochs=2), tmp_path / "auto.log")
    assert finish(explicit) == 2
    refused = text(tmp_path / "explicit.log")
    assert f"error: checkpoint {final} failed verification: sha256 mismatch" in refused
    assert not (tmp_path / "explicit").exists()

    assert finish(auto) == 0, text(tmp_path / "auto.log")[-3000:]
    log = text(tmp_path / "auto.log")
    assert f"checkpoint {final} failed verification: sha256 mismatch" in log
    assert f"resuming from {run_dir / 'checkpoints' / 'step-00000020.ckpt'}" in log
    assert [s for s, _, _ in steps(run_dir)] == list(range(1, 47))


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_really_full_disk_is_a_clear_error_and_the_previous_checkpoint_stays_valid(small_disk, tmp_path):
    run_dir = small_disk / "run"  # each checkpoint of the digits MLP is about 1 MiB
    args = ["--set", "checkpoint.every_n_steps=5", "--set", "checkpoint.keep_last=0"]
    code = run(train_argv(run_dir, *args, epochs=1), tmp_path / "full.log")
    log = text(tmp_path / "full.log")
    assert code == 2, log[-3000:]
    assert "error: cannot write the checkpoint" in log and "No space left on device" in log
    store = CheckpointStore(run_dir / "checkpoints")
    last = store.entries()[-1]["file"]
    assert f"the previous checkpoint {last} is intact" in log
    loaded, problems = store.newest_valid()
    assert loaded.path.name == last and problems == []
    assert not _temporaries(run_dir / "checkpoints")
