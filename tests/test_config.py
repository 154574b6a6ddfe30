"""Config layering and validation. `pytest tests/test_config.py` (imports no torch)."""
import subprocess
import sys

import pytest

from trainer.config import load_job_config, parse_override
from trainer.errors import UserError


def test_layers_defaults_then_yaml_then_cli(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("trainer:\n  max_epochs: 7\n  precision: bf16\nmodule_args:\n  lr: 0.01\n")
    config = load_job_config(str(job), {"trainer.max_epochs": 3})
    assert config.trainer.max_epochs == 3  # CLI wins
    assert config.trainer.precision == "bf16-mixed"  # from the YAML, canonicalised
    assert config.module_args == {"lr": 0.01}
    assert config.trainer.seed == 0  # default


def test_unknown_key_names_the_dotted_key_and_suggests():
    with pytest.raises(UserError, match=r"unknown config key 'trainer.max_epoch'.*Did you mean trainer.max_epochs"):
        load_job_config(None, {"trainer.max_epoch": 3})


def test_wrong_type_names_key_value_and_type():
    with pytest.raises(UserError, match=r"'trainer.max_epochs' got 'many' \(str\); it must be a int"):
        load_job_config(None, {"trainer.max_epochs": "many"})


@pytest.mark.parametrize("key, value", [("trainer.max_epochs", 0), ("trainer.last_batch", "keep"),
                                        ("trainer.log_every_n_steps", -1), ("module", "no_colon")])
def test_out_of_range_values_are_refused(key, value):
    with pytest.raises(UserError, match=key.split(".")[-1]):
        load_job_config(None, {key: value})


def test_override_values_are_yaml_scalars():
    assert parse_override("trainer.devices=[5]") == ("trainer.devices", [5])
    assert parse_override("trainer.progress_bar=false") == ("trainer.progress_bar", False)
    with pytest.raises(UserError, match="dotted.key=value"):
        parse_override("no-equals-sign")


def test_bad_yaml_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_job_config(str(bad))


def test_validation_imports_no_torch():
    code = (
        "import sys; from trainer.config import load_job_config; from trainer.runtime.startup import plan_runtime;"
        "plan_runtime(load_job_config(None, {'trainer.devices': 8}).trainer.devices, 'cpu');"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
