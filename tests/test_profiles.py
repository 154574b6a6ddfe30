"""Environment profiles in env/. `pytest tests/test_profiles.py` (imports no torch)."""
import subprocess

import pytest

from trainer.runtime import env_vars
from trainer.errors import UserError
from trainer.runtime.profiles import available_profiles, check_runtime_supported, env_dir, export_lines, load_profile


def test_shipped_profiles_load_and_use_only_known_variables():
    names = available_profiles()
    assert {"cpu", "tpu-vm", "xrt-tpu-vm", "xrt-tpu-node"} <= set(names)
    for name in names:
        profile = load_profile(name)
        assert set(profile.env) <= env_vars.KNOWN, name


def test_unknown_variable_in_a_profile_is_refused(tmp_path):
    (tmp_path / "typo.yaml").write_text("runtime: pjrt\nenv:\n  PJRT_DEVCE: CPU\n")
    with pytest.raises(UserError, match="sets PJRT_DEVCE, which tpu-trainer does not know"):
        load_profile("typo", tmp_path)


def test_unknown_profile_lists_the_available_ones():
    with pytest.raises(UserError, match=r"unknown environment profile 'gpu'.*cpu, tpu-vm"):
        load_profile("gpu")


def test_xrt_profiles_are_refused_with_torch_xla_2_1_or_later():
    with pytest.raises(UserError, match=r"removed in 2.1.*--env-profile tpu-vm"):
        check_runtime_supported(load_profile("xrt-tpu-vm"))


def test_xrt_node_profile_needs_the_tpu_ip():
    profile = load_profile("xrt-tpu-node")
    assert profile.render(8, {"TPU_IP_ADDRESS": "10.0.0.2"}) == {"XRT_TPU_CONFIG": "tpu_worker;0;10.0.0.2:8470"}
    with pytest.raises(UserError, match="needs the environment variable TPU_IP_ADDRESS"):
        profile.render(8, {})


def test_exports_evaluate_in_a_shell():
    script = export_lines(load_profile("cpu").render(devices=8)) + '\necho "$PJRT_DEVICE $CPU_NUM_DEVICES"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "CPU 8"


def test_env_dir_can_be_moved(monkeypatch, tmp_path):
    monkeypatch.setenv(env_vars.TPU_TRAINER_ENV_DIR, str(tmp_path))
    assert env_dir() == tmp_path
