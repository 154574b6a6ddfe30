"""Diagnostics that need a fresh process: debug mode's Python lines, quiet SPMD logs, the profiler.

`pytest tests/test_diagnostics_processes.py` (about a minute: each case starts torch_xla).
"""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli

SCRIPT = Path(__file__).with_name("diag_script.py")


def _script(mode: str, run_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, str(SCRIPT), mode, str(run_dir)], capture_output=True, text=True,
                          timeout=240, env=env, cwd=REPO)


def test_debug_mode_names_the_host_read_the_step_and_the_python_line(tmp_path):
    proc = _script("debug", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first = out["host_read_steps"][0]
    assert first["step"] == 1 and first["item_reads"] == 1
    line = next(i for i, t in enumerate(SCRIPT.read_text().splitlines(), 1) if "loss.item() > 1e6" in t)
    assert first["at"] == [f"user_training_step ({SCRIPT}:{line})"]
    assert f"at user_training_step ({SCRIPT}:{line})" in proc.stderr
    assert "access tensor value" in Path(out["xla_debug_log"]).read_text()
    assert Path(out["xla_metrics_report"]).read_text().count("aten::_local_scalar_dense") == 1


def test_spmd_deprecation_warning_is_said_once_and_other_warnings_stay(tmp_path):
    proc = _script("spmd", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compiles 4" in proc.stdout
    assert "GSPMD sharding propagation is going to be deprecated" not in proc.stderr
    assert proc.stderr.count("will be replaced by Shardy") == 1
    assert "a different warning from Python" in proc.stderr
    assert "a different XLA warning" in proc.stderr


def test_without_the_filter_xla_repeats_the_warning_on_every_compilation(tmp_path):
    proc = _script("spmd-unfiltered", tmp_path)  # negative control: the test above can fail
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("GSPMD sharding propagation is going to be deprecated") >= 4
    assert "will be replaced by Shardy" not in proc.stderr


def test_profile_steps_is_refused_at_the_edge_with_the_allowed_form(tmp_path):
    run = run_cli("train", "--profile-steps", "20:10", run_dir=tmp_path / "run", timeout=60)
    assert run.returncode == 2
    assert "--profile-steps) got '20:10'" in run.stderr and "1 <= FIRST <= LAST" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "run").exists()


def _xspace_plane_names(data: bytes) -> list[str]:
    """XSpace.planes (field 1) -> XPlane.name (field 2), read with the protobuf wire format."""

    def varint(buf: bytes, i: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            byte = buf[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not byte & 0x80:
                return value, i

    def fields(buf: bytes):
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, i = varint(buf, i)
            elif wire == 2:
                size, i = varint(buf, i)
                value, i = buf[i:i + size], i + size
            elif wire in (1, 5):
                value, i = buf[i:i + (8 if wire == 1 else 4)], i + (8 if wire == 1 else 4)
            else:
                raise ValueError(f"wire type {wire} at byte {i}: not a protobuf message")
            yield number, value

    return [dict(fields(plane)).get(2, b"").decode() for number, plane in fields(data) if number == 1]


def test_profile_window_writes_a_trace_tensorboard_can_load(xla_device, tmp_path):
    from diag_helpers import batches, run_steps
    from trainer.config import DiagnosticsConfig
    from trainer.diagnostics.profile_window import trace_files

    config = DiagnosticsConfig(profile_steps="3:6", profile_port=_free_port(), quiet_xla_logs=False)
    diag, _ = run_steps(xla_device, batches(9, seed=11), config, run_dir=tmp_path)
    summary = diag.finish(tmp_path)
    [xplane] = trace_files(tmp_path / "profile")
    assert summary["profile_trace"] == str(xplane)
    assert xplane.parent.parent.name == "profile" and xplane.parent.parent.parent.name == "plugins"
    planes = _xspace_plane_names(xplane.read_bytes())
    assert any(name.startswith("/host:") for name in planes), planes
    events = json.loads(gzip.decompress(next(xplane.parent.glob("*.trace.json.gz")).read_bytes()))["traceEvents"]
    steps = sorted(int(e["args"]["step_num"]) for e in events if e.get("name") == "train_step")
    assert steps == [3, 4, 5, 6]  # exactly the window, each step once
    assert any(e.get("name", "").startswith("dot") for e in events)  # the device's own ops are in it


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
