"""Run directories on Cloud Storage, against a real Cloud Storage server.

`pytest tests/test_cloud_storage.py` (about 3 minutes on 2 cores). The server is
`gcp-storage-emulator` (the JSON API over HTTP on 127.0.0.1, objects on disk) behind a
forwarding proxy that records requests and injects faults (`tests/storage_server.py`);
the trainer talks to it through gcsfs exactly as to Google's endpoint, selected by
STORAGE_EMULATOR_HOST. Every run is a real CLI process; a new staging directory per
process stands for a new VM (the local disk of a preempted one is gone).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from pathlib import Path

import pytest

from checkpoint_helpers import REPO, finish, start, text, train_argv, wait_for
from storage_server import StorageServer
from trainer.checkpoint.index import INDEX
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST

pytestmark = pytest.mark.slow

BUCKET = "runs-bucket"
PAUSE = ["--set", "module_args.step_sleep=0.05"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    storage = StorageServer(tmp_path_factory.mktemp("gcs-data"), BUCKET).start()
    yield storage
    storage.stop()


def _start(server, tmp_path, name: str, url: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    """The CLI training into `url`, with its own staging directory (a fresh VM's disk)."""
    log = tmp_path / f"{name}.log"
    return start(train_argv(url, *PAUSE, *extra), log, server.env(tmp_path / f"staging-{name}")), log


def _read(server, url: str, relative: str) -> bytes:
    return server.filesystem().cat_file(f"{url[len('gs://'):]}/{relative}")


def _steps(server, url: str) -> list[tuple[str, str, str]]:
    import csv
    import io

    rows = csv.DictReader(io.StringIO(_read(server, url, "steps.csv").decode()))
    return [(r["global_step"], r["epoch"], r["loss"]) for r in rows]


def _manifest(server, url: str) -> list[dict]:
    return json.loads(_read(server, url, f"checkpoints/{INDEX}"))["checkpoints"]


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory):
    """Side by side: a full run into the bucket (with two injected 503s on manifest commits),
    and a run SIGTERMed in epoch 2 then resumed with --resume auto from a fresh staging dir."""
    tmp_path = tmp_path_factory.mktemp("gcs-runs")
    full, cut = f"gs://{BUCKET}/runs/full", f"gs://{BUCKET}/runs/cut"
    server.inject(lambda r: r.is_upload and r.object_name == f"runs/full/checkpoints/{INDEX}", "503", times=2)
    reference, reference_log = _start(server, tmp_path, "full", full)
    interrupted, interrupted_log = _start(server, tmp_path, "cut", cut)
    wait_for(lambda: "checkpoint (epoch)" in text(interrupted_log), "epoch 1's checkpoint", interrupted)
    time.sleep(0.3)  # mid-epoch 2
    interrupted.send_signal(signal.SIGTERM)
    cut_code = finish(interrupted)
    resumed, resumed_log = _start(server, tmp_path, "resumed", cut, "--resume", "auto")
    return {"full": full, "cut": cut, "tmp": tmp_path, "codes": {
        "full": finish(reference), "cut": cut_code, "resumed": finish(resumed)},
        "logs": {"full": reference_log, "cut": interrupted_log, "resumed": resumed_log}}


def test_a_full_run_writes_every_output_to_the_bucket(server, runs):
    assert runs["codes"]["full"] == 0, text(runs["logs"]["full"])[-3000:]
    names = {p.split("/runs/full/", 1)[1] for p in server.filesystem().find(f"{BUCKET}/runs/full")}
    for expected in ("config.yaml", "metrics.csv", "steps.csv", "summary.json", RUN_MANIFEST, "metrics.png",
                     f"checkpoints/{INDEX}", "checkpoints/final.ckpt", "checkpoints/step-00000023.ckpt",
                     "checkpoints/step-00000046.ckpt"):
        assert expected in names, sorted(names)
    assert any(n.startswith("tb/events.out.tfevents") for n in names), sorted(names)
    summary = json.loads(_read(server, runs["full"], "summary.json"))
    assert summary["epochs"] == 3 and summary["val_accuracy"] > 0.9
    assert [e["file"] for e in _manifest(server, runs["full"])] == [
        "step-00000023.ckpt", "step-00000046.ckpt", "final.ckpt"]
    assert "run_dir: gs://runs-bucket/runs/full" in _read(server, runs["full"], "config.yaml").decode()
    assert f"outputs in {runs['full']}" in text(runs["logs"]["full"])
    worker_log = _read(server, runs["full"], "workers/0/train.log").decode()
    assert "epoch 3/3" in worker_log and "checkpoint (final)" in worker_log


def test_transient_503s_are_retried_with_backoff_and_logged(runs):
    log = text(runs["logs"]["full"])
    assert log.count("Cloud Storage: transient error, retrying with backoff") == 2, log[-3000:]
    assert "injected: service unavailable" in log


def test_sigterm_then_resume_auto_from_the_bucket_gives_bitwise_equal_losses(server, runs):
    assert runs["codes"]["cut"] == 143, text(runs["logs"]["cut"])[-3000:]
    assert runs["codes"]["resumed"] == 0, text(runs["logs"]["resumed"])[-3000:]
    preempted = [e for e in _manifest(server, runs["cut"]) if e["reason"] == "preempted"]
    assert preempted and preempted[0]["position"]["epoch"] == 2, _manifest(server, runs["cut"])
    resumed_log = text(runs["logs"]["resumed"])
    assert "pulled" in resumed_log and "resuming from" in resumed_log and preempted[0]["file"] in resumed_log
    reference = _steps(server, runs["full"])
    assert len(reference) == 3 * 23
    assert _steps(server, runs["cut"]) == reference
    worker_log = _read(server, runs["cut"], "workers/0/train.log").decode()  # both processes' lines
    assert "checkpoint (preempted)" in worker_log and "resuming from" in worker_log


def test_a_corrupted_checkpoint_object_is_detected_by_its_hash_and_an_older_one_used(server, runs, tmp_path):
    """Flip one byte of final.ckpt in the bucket: --resume auto names it and falls back."""
    fs = server.filesystem()
    url = f"gs://{BUCKET}/runs/corrupt"
    fs.copy(f"{BUCKET}/runs/full", f"{BUCKET}/runs/corrupt", recursive=True)
    target = f"{BUCKET}/runs/corrupt/checkpoints/final.ckpt"
    data = bytearray(fs.cat_file(target))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(target, bytes(data))
    proc, log = _start(server, tmp_path, "corrupt", url, "--resume", "auto", "--max-epochs", "4")
    assert finish(proc) == 0, text(log)[-3000:]
    out = text(log)
    assert "final.ckpt failed verification: sha256 mismatch" in out, out[-3000:]
    assert "resuming from" in out and "step-00000046.ckpt" in out


def test_server_killed_during_a_checkpoint_commit_leaves_the_previous_checkpoint_valid(server, runs, tmp_path):
    """The server dies when the manifest of epoch 2's checkpoint is being committed (its
    object is already uploaded). The run fails with one paragraph; with the server back,
    --resume auto continues from epoch 1's checkpoint, removes the uncommitted object, and
    ends with the reference run's losses."""
    url, prefix = f"gs://{BUCKET}/runs/killed", "runs/killed/checkpoints/"
    server.inject(lambda r: r.is_upload and r.object_name == prefix + INDEX
                  and any(q.object_name == prefix + "step-00000046.ckpt" for q in server.requests), "kill")
    proc, log = _start(server, tmp_path, "killed", url)
    code = finish(proc)
    out = text(log)
    assert code == 2, out[-3000:]
    assert "cannot upload the checkpoint to gs://runs-bucket/runs/killed/checkpoints" in out
    assert "its newest committed checkpoint, step-00000023.ckpt, is intact" in out
    server.start()  # same port, same objects on disk
    assert [e["file"] for e in _manifest(server, url)] == ["step-00000023.ckpt"]
    proc, log = _start(server, tmp_path, "after-kill", url, "--resume", "auto")
    assert finish(proc) == 0, text(log)[-3000:]
    out = text(log)
    assert "removed 1 uncommitted checkpoint objects" in out and "step-00000046.ckpt" in out
    assert "resuming from" in out and "step-00000023.ckpt" in out
    assert _steps(server, url) == _steps(server, runs["full"])


def test_manifest_commits_send_a_generation_precondition(server, runs):
    """What the server received for run full's manifest: every commit is conditional on the
    generation the writer last saw (0: must not exist yet). gcp-storage-emulator does not
    enforce preconditions, so this checks the requests, not a refused overwrite."""
    commits = [r for r in server.requests
               if r.is_upload and r.object_name == f"runs/full/checkpoints/{INDEX}"]
    sent = [r.query.get("ifGenerationMatch", [None])[0] for r in commits]
    assert sent[0] == "0" and all(g not in (None, "0") for g in sent[3:]), sent  # 2 retried 503s, then the first
    assert len(set(sent[2:])) == len(sent[2:])  # each commit names the generation of the one before


def test_a_missing_bucket_is_refused_at_start_up_before_any_xla_work(server, tmp_path):
    proc, log = _start(server, tmp_path, "missing", "gs://no-such-bucket/runs/x", "--max-epochs", "1")
    assert finish(proc) == 2
    out = text(log)
    assert "--run-dir gs://no-such-bucket/runs/x: the bucket gs://no-such-bucket does not exist" in out, out
    assert "gcloud storage buckets create gs://no-such-bucket" in out
    assert "training on" not in out and "Traceback" not in out  # nothing started; one paragraph


@pytest.mark.parametrize("front_end, said", [("python", "run_dir='gs://Bad_Bucket/x'"),
                                             ("cli", "--run-dir gs://Bad_Bucket/x"),
                                             ("make", "RUN_DIR='gs://Bad_Bucket/x'")])
def test_a_malformed_bucket_url_is_refused_in_the_users_spelling(front_end, said):
    from trainer import Trainer
    from trainer.errors import UserError
    from trainer.spelling import Spelling

    with pytest.raises(UserError, match="is not a usable Cloud Storage run directory") as caught:
        Trainer(run_dir="gs://Bad_Bucket/x", spelling=Spelling(front_end)).check_run_dir()
    assert str(caught.value).startswith(said)


def test_trainer_run_dir_from_python_publishes_to_the_bucket(server, tmp_path):
    """The library's spelling. In its own process: an in-process fit would leave its compiled
    graphs cached for the tests after this one (test_engine asserts epoch 1 compiles)."""
    url = f"gs://{BUCKET}/runs/python"
    script = (
        "from trainer import Trainer\n"
        "from trainer.examples.digits import DigitsClassifier\n"
        f"result = Trainer(devices=1, max_epochs=1, run_dir={url!r}, enable_progress_bar=False,\n"
        "                  env_profile='cpu').fit(DigitsClassifier())\n"
        "print('run_url', result.run_url)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **server.env(tmp_path / "staging")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"run_url {url}" in proc.stdout
    assert json.loads(_read(server, url, "summary.json"))["epochs"] == 1
    assert [e["file"] for e in _manifest(server, url)] == ["final.ckpt"]
