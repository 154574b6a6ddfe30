"""End-to-end runs of the real CLI on CPU-emulated XLA, as `make train` runs them.

`pytest tests/test_cli.py` (about 2 minutes: each run imports torch_xla and compiles).
"""
import csv
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_cli

RUN_FILES = {"config.yaml", "metrics.csv", "steps.csv", "summary.json", "metrics.png", "tb", "checkpoints"}


def _check_run_dir(run):
    assert RUN_FILES <= {p.name for p in run.run_dir.iterdir()}
    assert (run.run_dir / "checkpoints" / "final.ckpt").stat().st_size > 10_000
    assert any((run.run_dir / "tb").glob("events.out.tfevents.*"))
    assert (run.run_dir / "metrics.png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(open(run.run_dir / "metrics.csv")))
    assert [int(r["compiles"]) for r in rows[1:]] == [0] * (len(rows) - 1)
    return rows


@pytest.mark.slow
def test_default_job_on_one_core_fp32(tmp_path):
    run = run_cli("train", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    rows = _check_run_dir(run)
    assert run.summary["val_accuracy"] >= 0.95
    assert run.summary["compiles_after_first_epoch"] == 0
    assert run.summary["devices"] == 1 and run.summary["precision"] == "fp32"
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])


@pytest.mark.slow
def test_eight_cores_bf16_is_spmd_data_parallel(tmp_path):
    run = run_cli("train", "--cores", "8", "--precision", "bf16", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    _check_run_dir(run)
    assert run.summary["val_accuracy"] >= 0.93
    assert run.summary["compiles_after_first_epoch"] == 0
    assert run.summary["devices"] == 8 and run.summary["precision"] == "bf16-mixed"
    assert "8 devices (SPMD data parallel)" in run.stderr
    config = (run.run_dir / "config.yaml").read_text()
    assert "CPU_NUM_DEVICES: '8'" in config and "spmd: true" in config


@pytest.mark.slow
def test_one_named_device(tmp_path):
    run = run_cli("train", "--cores", "[5]", "--max-epochs", "4", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "device 5 only (xla:5)" in run.stderr
    assert run.summary["device_index"] == 5
    assert run.summary["compiles_after_first_epoch"] == 0


@pytest.mark.parametrize("cores", ["3", "0", "abc", "[8]"])
def test_bad_cores_fail_fast_before_xla_and_create_nothing(tmp_path, cores):
    started = time.perf_counter()
    run = run_cli("train", "--cores", cores, run_dir=tmp_path / "run")
    assert time.perf_counter() - started < 10  # refused before torch_xla's import
    assert run.returncode == 2
    assert "allowed" in run.stderr.lower() or "accepts" in run.stderr
    assert "1, 8, auto, or one device index as a list" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "run").exists()


def test_bad_precision_through_invoke_names_the_allowed_list(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "invoke", "train", "--precision", "fp8", "--run-dir", str(tmp_path / "r")],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "PRECISION" not in proc.stdout
    assert "Allowed: fp32 (default), bf16" in proc.stderr


def test_make_passes_cores_through_to_the_engine(tmp_path):
    proc = subprocess.run(["make", "train", "CORES=3", f"RUN_DIR={tmp_path / 'r'}"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "CORES=3 is not a valid device selection" in proc.stderr


def test_unknown_module_is_a_clear_error(tmp_path):
    run = run_cli("train", "--module", "no_such_pkg.models:Net", run_dir=tmp_path / "run")
    assert run.returncode == 2
    assert "cannot load the module 'no_such_pkg.models:Net'" in run.stderr


def test_job_yaml_and_set_overrides_reach_the_module(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("module: trainer.examples.digits:DigitsClassifier\nmodule_args:\n  hidden: 32\ntrainer:\n  max_epochs: 2\n")
    run = run_cli("train", "--config", str(job), "--set", "module_args.lr=0.01", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    config = (run.run_dir / "config.yaml").read_text()
    assert "hidden: 32" in config and "lr: 0.01" in config and "max_epochs: 2" in config
    assert run.summary["epochs"] == 2


def test_wrong_module_args_name_the_signature(tmp_path):
    run = run_cli("train", "--set", "module_args.hiden=3", run_dir=tmp_path / "run")
    assert run.returncode == 2
    assert "module_args {'hiden': 3} do not fit" in run.stderr and "hidden" in run.stderr
