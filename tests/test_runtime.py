"""Preflight before torch_xla: profile choice, TPU checks, the version pair.

`pytest tests/test_runtime.py`. The version-pair test installs a second, real
`torch` distribution record (dist-info) ahead of the venv's on PYTHONPATH, which is
exactly what a mismatched `pip install torch` leaves behind.
"""
import subprocess
import sys

import pytest

from trainer.errors import UserError
from trainer.runtime.startup import default_profile_name, plan_runtime, tpu_host_devices


def test_cpu_host_defaults_to_the_cpu_profile_and_says_why():
    name, why = default_profile_name({})
    assert name == "cpu" and "no TPU" in why


def test_tpu_accelerator_type_selects_tpu_vm():
    assert default_profile_name({"TPU_ACCELERATOR_TYPE": "v4-8"})[0] == "tpu-vm"


@pytest.mark.parametrize("accelerator, devices", [("v3-8", 8), ("v2-8", 8), ("v4-8", 4), ("v5litepod-4", 4), ("v3-32", 8)])
def test_tpu_device_count_per_host(accelerator, devices):
    assert tpu_host_devices({"TPU_ACCELERATOR_TYPE": accelerator}) == devices


def test_tpu_profile_without_a_tpu_fails_before_any_xla_work():
    with pytest.raises(UserError, match=r"no TPU devices.*--env-profile cpu"):
        plan_runtime(1, "tpu-vm")


def test_cpu_profile_sizes_cpu_devices_to_the_run():
    assert plan_runtime("8", "cpu").env["CPU_NUM_DEVICES"] == "8"
    assert plan_runtime(1, "cpu").env["CPU_NUM_DEVICES"] == "1"
    assert plan_runtime("[5]", "cpu").env["CPU_NUM_DEVICES"] == "6"


def test_mismatched_torch_is_refused_with_both_versions_and_the_fix(tmp_path):
    info = tmp_path / "torch-2.13.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
    proc = subprocess.run([sys.executable, "-m", "trainer", "preflight"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "torch 2.13.0 and torch_xla 2.9.0 are not a matched pair" in proc.stderr
    assert "pip install torch==2.9.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_matched_pair_passes_preflight():
    proc = subprocess.run([sys.executable, "-m", "trainer", "preflight"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "a matched pair" in proc.stdout


def test_explicit_pjrt_tpu_never_falls_back_to_cpu():
    assert default_profile_name({"PJRT_DEVICE": "TPU"})[0] == "tpu-vm"


def test_launcher_topology_must_match_the_runtime():
    from trainer.runtime.startup import check_launcher_topology

    check_launcher_topology(0, 1, {})
    check_launcher_topology(1, 2, {"TPU_TRAINER_PROCESS_INDEX": "1", "TPU_TRAINER_PROCESS_COUNT": "2"})
    with pytest.raises(UserError, match=r"process 1 of 2 .* says it is process 0 of 1.*worker order"):
        check_launcher_topology(0, 1, {"TPU_TRAINER_PROCESS_INDEX": "1", "TPU_TRAINER_PROCESS_COUNT": "2"})
