"""Checkpoint files and their manifest: atomic commit, keep_last, verification, fallback, disk full.

`pytest tests/test_checkpoint.py` (a few seconds, no XLA). Real files on disk and a real
`torch.load`; the one injected fault is the OSError(ENOSPC) a full disk raises mid-write.
The same scenarios through real training processes are in test_checkpoint_crash.py and
test_resume.py.
"""
from __future__ import annotations

import errno
import json

import pytest
import torch

from trainer.outputs import atomic_files
from trainer.checkpoint import io as checkpoint
from trainer.checkpoint.index import INDEX as MANIFEST
from trainer.checkpoint.resume import find_resume
from trainer.checkpoint.store import CheckpointStore
from trainer.checkpoint.verify import CheckpointError


def _state(step: int) -> dict:
    return {"module": {"w": torch.full((1000,), float(step))}, "global_step": step}


def _store(tmp_path, keep_last=0) -> CheckpointStore:
    store = CheckpointStore(tmp_path / "checkpoints", keep_last=keep_last)
    store.start()
    return store


def _saved(store, *steps) -> list:
    return [store.save(_state(s), f"step-{s:08d}.ckpt", {"global_step": s}) for s in steps]


def test_a_committed_checkpoint_loads_back_verified(tmp_path):
    store = _store(tmp_path)
    entry, = _saved(store, 7)
    loaded = store.load(store.directory / "step-00000007.ckpt")
    assert loaded.sha256 == entry["sha256"] == checkpoint.sha256_of(loaded.path)
    assert torch.equal(loaded.state["module"]["w"], _state(7)["module"]["w"])
    assert json.loads((store.directory / MANIFEST).read_text())["checkpoints"][0]["file"] == "step-00000007.ckpt"


def test_keep_last_keeps_the_newest_and_final(tmp_path):
    store = _store(tmp_path, keep_last=2)
    _saved(store, 1, 2)
    store.save(_state(3), "final.ckpt", {"global_step": 3})
    _saved(store, 4)
    assert [e["file"] for e in store.entries()] == ["step-00000002.ckpt", "final.ckpt", "step-00000004.ckpt"]
    assert sorted(p.name for p in store.directory.glob("*.ckpt")) == ["final.ckpt", "step-00000002.ckpt", "step-00000004.ckpt"]


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


def _empty(path):
    path.write_bytes(b"")


def _flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside the tensor data: torch.load alone would not notice
    path.write_bytes(bytes(data))


def _drop_entry(path):
    manifest = path.parent / MANIFEST
    data = json.loads(manifest.read_text())
    data["checkpoints"] = [e for e in data["checkpoints"] if e["file"] != path.name]
    manifest.write_text(json.dumps(data))


CORRUPTIONS = {
    "truncated": (_truncate, "bytes, but the manifest recorded"),
    "empty": (_empty, "is empty, but the manifest recorded"),
    "one byte flipped": (_flip_one_byte, "sha256 mismatch"),
    "missing manifest entry": (_drop_entry, "has no entry in"),
}


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_a_damaged_newest_checkpoint_is_reported_by_name_and_the_previous_one_used(tmp_path, kind, caplog):
    damage, message = CORRUPTIONS[kind]
    store = _store(tmp_path)
    _saved(store, 10, 20)
    newest = store.directory / "step-00000020.ckpt"
    damage(newest)
    if kind == "one byte flipped":  # the premise: torch.load itself accepts the damaged file
        assert torch.load(newest, weights_only=True)["global_step"] == 20
    loaded, problems = store.newest_valid()
    assert loaded.state["global_step"] == 10
    assert len(problems) == 1 and str(newest) in problems[0] and message in problems[0]
    with caplog.at_level("WARNING"):
        assert find_resume("auto", tmp_path).state["global_step"] == 10
    assert str(newest) in caplog.text and message in caplog.text


def test_an_explicit_resume_from_a_corrupted_file_refuses_with_the_hash_mismatch(tmp_path):
    store = _store(tmp_path)
    entry, = _saved(store, 10)
    path = store.directory / "step-00000010.ckpt"
    _flip_one_byte(path)
    with pytest.raises(CheckpointError) as caught:
        find_resume(str(path), None)
    assert str(path) in str(caught.value) and "sha256 mismatch" in str(caught.value)
    assert entry["sha256"] in str(caught.value)


def test_resume_auto_refuses_when_no_checkpoint_verifies_and_starts_fresh_when_there_is_none(tmp_path):
    assert find_resume("auto", tmp_path / "new-run") is None
    store = _store(tmp_path)
    _saved(store, 10)
    _empty(store.directory / "step-00000010.ckpt")
    with pytest.raises(CheckpointError, match="none of the 1 checkpoints"):
        find_resume("auto", tmp_path)


def test_disk_full_during_the_write_is_a_clear_error_and_the_previous_checkpoint_survives(tmp_path, monkeypatch):
    store = _store(tmp_path, keep_last=1)
    previous, = _saved(store, 10)
    real_fdopen = atomic_files.os.fdopen

    class FullDisk:
        """The file a full disk gives: the first 4 KiB are accepted, then ENOSPC."""

        def __init__(self, f):
            self.f, self.written = f, 0

        def write(self, data):
            if self.written + len(data) > 4096:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(atomic_files.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(CheckpointError) as caught:
        store.save(_state(20), "step-00000020.ckpt", {"global_step": 20})
    monkeypatch.undo()
    message = str(caught.value)
    assert "No space left on device" in message and "step-00000020.ckpt" in message
    assert "step-00000010.ckpt is intact" in message
    assert [e["file"] for e in store.entries()] == ["step-00000010.ckpt"]  # keep_last=1 deleted nothing
    assert store.load(store.directory / "step-00000010.ckpt").sha256 == previous["sha256"]
    assert sorted(p.name for p in store.directory.iterdir()) == [MANIFEST, "step-00000010.ckpt"]  # no temporary left


def test_start_up_removes_temporaries_a_killed_writer_left(tmp_path):
    store = _store(tmp_path)
    _saved(store, 10)
    leftover = store.directory / f"{checkpoint.TMP_PREFIX}step-00000020.ckpt.abc123"
    leftover.write_bytes(b"half a checkpoint")
    CheckpointStore(store.directory).start()
    assert not leftover.exists()
    assert store.load(store.directory / "step-00000010.ckpt").state["global_step"] == 10


def test_checkpoint_and_resume_settings_are_validated_with_the_dotted_key():
    from trainer.config import load_job_config
    from trainer.errors import UserError

    job = load_job_config(None, {"checkpoint.every_n_steps": 50, "checkpoint.keep_last": 2})
    assert (job.checkpoint.every_n_steps, job.checkpoint.every_n_epochs, job.checkpoint.keep_last) == (50, 1, 2)
    with pytest.raises(UserError, match="'checkpoint.keep_last' got -1"):
        load_job_config(None, {"checkpoint.keep_last": -1})
    with pytest.raises(UserError, match="'trainer.resume' got 'auto'.*run directory"):
        load_job_config(None, {"trainer.resume": "auto"})


def test_a_committed_file_is_never_overwritten_before_its_replacement_commits(tmp_path, monkeypatch):
    """An extended run writes final.ckpt again: the old one is kept (renamed) until the new one commits."""
    store = _store(tmp_path)
    store.save(_state(23), "final.ckpt", {"global_step": 23})

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match="final-at-step-00000023.ckpt is intact"):
        store.save(_state(46), "final.ckpt", {"global_step": 46})
    monkeypatch.undo()
    loaded, problems = store.newest_valid()
    assert loaded.path.name == "final-at-step-00000023.ckpt" and loaded.state["global_step"] == 23
    store.save(_state(46), "final.ckpt", {"global_step": 46})
    assert [e["file"] for e in store.entries()] == ["final-at-step-00000023.ckpt", "final.ckpt"]
    assert store.newest_valid()[0].state["global_step"] == 46
