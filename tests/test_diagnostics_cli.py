"""The diagnostics through the real CLI: debug report, recompilation guard,
--strict-compile, host-read and fallback counters per epoch, profiler trace, cache decision.

`pytest tests/test_diagnostics_cli.py` (about 2 minutes). The modules that misbehave on
purpose are in tests/helpers_modules.py; the default job is the negative control.
"""
from __future__ import annotations

import csv

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


def _epochs(run_dir) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_debug_report_names_the_fallback_op_and_the_counters_see_the_item(tmp_path):
    run = run_cli("train", "--module", "tests.helpers_modules:HostReadsAndFallback", "--max-epochs", "2",
                  "--debug", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    report = (tmp_path / "run" / "xla_metrics.txt").read_text()
    assert "aten::nonzero" in report
    assert "debug: " in run.stderr and "nonzero" in run.stderr  # the printed summary names it
    assert "helpers_modules.py" in run.stderr  # the host read's Python line, from torch_xla's own analysis
    for row in _epochs(tmp_path / "run"):
        assert float(row["host_transfers_per_step_outside_logging"]) >= 1.0
        assert int(row["cpu_fallback_ops"]) >= 22  # one per step


def test_the_default_job_reads_nothing_and_falls_back_nowhere(tmp_path):
    run = run_cli("train", "--max-epochs", "2", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    for row in _epochs(tmp_path / "run"):
        assert float(row["host_transfers_per_step_outside_logging"]) == 0.0
        assert int(row["cpu_fallback_ops"]) == 0 and int(row["compiles_after_warmup"]) == 0
    assert run.summary["compile_cache"]  # the cache decision is reported, even when not asked for


def test_guard_names_the_key_and_shapes_and_strict_compile_fails_the_run(tmp_path):
    args = ("train", "--module", "tests.helpers_modules:GrowingSequences", "--max-epochs", "3", "--no-progress")
    run = run_cli(*args, run_dir=tmp_path / "warn")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "batch['tokens']: (64, 8) int64 -> (64, 12) int64" in run.stderr
    assert int(_epochs(tmp_path / "warn")[1]["compiles_after_warmup"]) > 0
    strict = run_cli(*args, "--strict-compile", run_dir=tmp_path / "strict")
    assert strict.returncode == 2
    assert "batch['tokens']" in strict.stderr and "Traceback" not in strict.stderr


def test_profile_steps_writes_a_trace_into_the_run_directory(tmp_path):
    run = run_cli("train", "--max-epochs", "1", "--profile-steps", "3:6", "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    [xplane] = list((tmp_path / "run" / "profile" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert xplane.stat().st_size > 0 and run.summary["profile_trace"] == str(xplane)


def test_compile_cache_on_pjrt_cpu_is_switched_off_with_the_reason(tmp_path):
    run = run_cli("train", "--max-epochs", "1", "--compile-cache", str(tmp_path / "cache"), "--no-progress",
                  run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "off" in run.summary["compile_cache"] and "deserial" in run.summary["compile_cache"].lower()
    assert run.stderr.count("compilation cache") == 1


def test_a_host_read_inside_hugging_face_code_is_named_with_its_line(tmp_path):
    run = run_cli("train", "--module", "tests.helpers_modules:TinyBert", "--max-epochs", "2", "--debug",
                  "--no-progress", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "device->host read(s) inside the training step (.item()/bool()" in run.stderr
    assert "masking_utils.py" in run.stderr  # the line in transformers that reads the mask
    assert all(float(row["host_transfers_per_step_outside_logging"]) >= 1 for row in _epochs(tmp_path / "run"))
