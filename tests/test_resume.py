"""Exact resume after SIGTERM/SIGINT, with real processes and real signals.

`pytest tests/test_resume.py` (about 3 minutes on 2 cores). Each scenario trains
SlowDigits (the digits MLP plus dropout, so the XLA RNG matters; a short host pause per
step so a signal lands mid-epoch) uninterrupted and, at the same time, interrupted by a
signal in epoch 2; then resumes with `--resume auto` and compares every logged loss
(steps.csv holds their exact repr). The negative controls prove the comparison can fail:
the same checkpoint with its data position or its RNG state removed (re-saved with a
fresh manifest hash, so it passes verification) must give different losses.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from checkpoint_helpers import REPO, finish, run, start, steps, text, train_argv, wait_for
from trainer.checkpoint.store import CheckpointStore
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST

pytestmark = pytest.mark.slow

PAUSE = ["--set", "module_args.step_sleep=0.05"]


def _interrupt(tmp_path, sig, *extra):
    """Reference and interrupted runs side by side; returns (reference dir, interrupted dir, exit code, log)."""
    ref, cut = tmp_path / "reference", tmp_path / "interrupted"
    reference = start(train_argv(ref, *PAUSE, *extra), tmp_path / "reference.log")
    log = tmp_path / "interrupted.log"
    proc = start(train_argv(cut, *PAUSE, *extra), log)
    wait_for(lambda: "epoch 1/3" in text(log), "the end of epoch 1", proc)
    time.sleep(0.3)  # ~6 steps of 50 ms into epoch 2: mid-epoch, well before its end
    proc.send_signal(sig)
    code = finish(proc)
    assert finish(reference) == 0, text(tmp_path / "reference.log")[-3000:]
    return ref, cut, code, text(log)


def _epochs(run_dir) -> list[dict]:
    import csv

    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _checkpoint(run_dir):
    store = CheckpointStore(run_dir / "checkpoints")
    return store, store.entries()[-1]


@pytest.fixture(scope="module")
def sigterm_runs(tmp_path_factory):
    """SIGTERM in epoch 2 (CORES=1, fp32), then resumes: the real one and two broken ones."""
    tmp_path = tmp_path_factory.mktemp("sigterm")
    ref, cut, code, log = _interrupt(tmp_path, signal.SIGTERM)
    store, entry = _checkpoint(cut)
    controls = {name: tmp_path / name for name in ("no-data-position", "no-rng")}
    for name, run_dir in controls.items():
        shutil.copytree(cut, run_dir)
        _break(CheckpointStore(run_dir / "checkpoints"), entry, name)
    resumes = {name: start(train_argv(d, *PAUSE, "--resume", "auto"), tmp_path / f"{name}.log")
               for name, d in {"resumed": cut, **controls}.items()}
    codes = {name: finish(proc) for name, proc in resumes.items()}
    return {"reference": ref, "interrupted": cut, "exit": code, "log": log, "entry": entry,
            "codes": codes, "controls": controls, "tmp": tmp_path}


def _break(store: CheckpointStore, entry: dict, what: str) -> None:
    """Re-save the checkpoint as a resume that forgets `what` would see it (fresh hash, so it verifies)."""
    state = store.load(store.directory / entry["file"]).state
    if what == "no-data-position":  # restart the epoch's loader from scratch instead of where it was
        state["position"]["batch"] = 0
        state["epoch_start_rng"]["loader"] = [torch.Generator().manual_seed(0).get_state()]
    else:  # keep the data position but reseed every generator instead of restoring it
        state["xla_rng"] = 0
        state["epoch_start_rng"]["torch"] = torch.Generator().manual_seed(0).get_state()
    meta = {k: v for k, v in entry.items() if k not in ("file", "sha256", "bytes", "saved_at")}
    store.save(state, entry["file"], meta)


def test_sigterm_checkpoints_at_the_next_step_boundary_and_exits_143(sigterm_runs):
    assert sigterm_runs["exit"] == 143, sigterm_runs["log"][-3000:]
    assert "SIGTERM received: finishing the current step" in sigterm_runs["log"]
    entry = sigterm_runs["entry"]
    assert entry["reason"] == "preempted"
    assert entry["position"]["epoch"] == 2 and 0 < entry["position"]["batch"] < 23, entry  # mid-epoch
    assert f"checkpoint (preempted): {sigterm_runs['interrupted'] / 'checkpoints' / entry['file']}" in sigterm_runs["log"]


def test_resume_gives_the_same_full_loss_list_as_a_run_never_interrupted(sigterm_runs):
    assert sigterm_runs["codes"]["resumed"] == 0, text(sigterm_runs["tmp"] / "resumed.log")[-3000:]
    reference, resumed = steps(sigterm_runs["reference"]), steps(sigterm_runs["interrupted"])
    assert len(reference) == 3 * 23
    assert resumed == reference
    exact = ("epoch", "global_step", "train_loss", "val_loss", "val_accuracy")  # epoch means too
    ref_epochs, resumed_epochs = _epochs(sigterm_runs["reference"]), _epochs(sigterm_runs["interrupted"])
    assert [[r[k] for k in exact] for r in resumed_epochs] == [[r[k] for k in exact] for r in ref_epochs]
    assert resumed_epochs[2]["compiles"] == "0"  # restored state is device data: no recompilation
    resumed_log = text(sigterm_runs["tmp"] / "resumed.log")
    assert f"resuming from {sigterm_runs['interrupted'] / 'checkpoints' / sigterm_runs['entry']['file']}" in resumed_log


@pytest.mark.parametrize("control", ["no-data-position", "no-rng"])
def test_negative_control_a_resume_without_data_position_or_rng_does_not_match(sigterm_runs, control):
    """The equality test above can fail: the same resume, minus one piece of state, diverges."""
    assert sigterm_runs["codes"][control] == 0, text(sigterm_runs["tmp"] / f"{control}.log")[-3000:]
    reference, broken = steps(sigterm_runs["reference"]), steps(sigterm_runs["controls"][control])
    step = sigterm_runs["entry"]["global_step"]
    assert broken[:step] == reference[:step]  # identical up to the checkpoint...
    assert broken != reference  # ...and not after it


def test_run_manifest_records_the_job_and_where_it_resumed_from(sigterm_runs):
    import json

    manifest = json.loads((sigterm_runs["interrupted"] / RUN_MANIFEST).read_text())
    assert manifest["job"]["module"] == "tests.helpers_modules:SlowDigits" and manifest["seed"] == 0
    assert manifest["versions"]["torch"].startswith("2.") and manifest["versions"]["python"].count(".") == 2
    assert manifest["device_count"] == 1 and manifest["host_count"] == 1 and manifest["env_profile"] == "cpu"
    assert manifest["xla_environment"]["PJRT_DEVICE"] == "CPU"
    assert manifest["image"] is None  # not run in our image
    assert manifest["git"] is None or len(manifest["git"]["revision"]) == 40
    resume, = manifest["resumes"]
    assert resume["global_step"] == sigterm_runs["entry"]["global_step"]
    assert resume["checkpoint"].endswith(sigterm_runs["entry"]["file"])


def test_invoke_reproduce_reruns_the_resumed_job_and_the_losses_match(sigterm_runs):
    """Also the determinism test: the reproduction and the reference are two fresh runs, same seed."""
    out = sigterm_runs["tmp"] / "reproductions"
    proc = subprocess.run([sys.executable, "-m", "invoke", "reproduce", str(sigterm_runs["interrupted"]), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "losses match: 69 logged steps, bitwise identical" in proc.stdout
    reproduction, = [p for p in out.iterdir() if p.is_dir()]
    assert steps(reproduction) == steps(sigterm_runs["reference"])


@pytest.mark.parametrize("cores, precision, sig", [
    ("8", "bf16", signal.SIGINT),
    ("8", "fp32", signal.SIGTERM),
    ("1", "bf16", signal.SIGTERM),
])
def test_resume_is_exact_on_8_devices_and_in_bf16(tmp_path, cores, precision, sig):
    """The other corners of CORES x PRECISION (CORES=1 fp32 is the fixture above); SIGINT exits 130."""
    extra = ("--cores", cores, "--precision", precision)
    ref, cut, code, log = _interrupt(tmp_path, sig, *extra)
    assert code == 128 + sig, log[-3000:]
    name = signal.Signals(sig).name
    assert f"{name} received" in log and f"interrupted: stopped by {name}" in log
    entry = _checkpoint(cut)[1]
    assert entry["position"]["epoch"] == 2 and 0 < entry["position"]["batch"] < 23, entry
    assert run(train_argv(cut, *PAUSE, *extra, "--resume", "auto"), tmp_path / "resumed.log") == 0, \
        text(tmp_path / "resumed.log")[-3000:]
    assert steps(cut) == steps(ref) and len(steps(ref)) == 69


def test_resume_is_exact_after_a_sigterm_in_the_middle_of_an_accumulation_window(tmp_path):
    """Batches of 16, 4 per optimizer step: the signal arrives at batch 41 of epoch 2 (the second of
    its window); the run finishes the window, saves at its boundary (batch 44), and resumes exactly."""
    module = "tests.helpers_modules:SignalsItself"
    args = ("--accumulate-grad-batches", "4", "--set", "module_args.batch_size=16")
    ref, cut = tmp_path / "reference", tmp_path / "interrupted"
    assert run(train_argv(ref, *args, module=module), tmp_path / "reference.log") == 0, \
        text(tmp_path / "reference.log")[-3000:]
    signal_at = ("--set", "module_args.signal_epoch=2", "--set", "module_args.signal_batch=41")
    assert run(train_argv(cut, *args, *signal_at, module=module), tmp_path / "cut.log") == 143, \
        text(tmp_path / "cut.log")[-3000:]
    entry = _checkpoint(cut)[1]
    assert entry["reason"] == "preempted" and entry["position"] == {"epoch": 2, "batch": 44}
    assert entry["global_step"] == 23 + 11  # epoch 1's 23 optimizer steps, then 11 windows of 4
    assert run(train_argv(cut, *args, *signal_at, "--resume", "auto", module=module), tmp_path / "resumed.log") == 0, \
        text(tmp_path / "resumed.log")[-3000:]
    assert steps(cut) == steps(ref) and len(steps(ref)) == 69
