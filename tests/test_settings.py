"""The one settings table: every name reaches its front end, and errors speak the user's spelling.

    .venv/bin/python -m pytest tests/test_settings.py     # a few seconds, no XLA

The make tests run the real `make` with this Python's venv (VENV=sys.prefix); a stand-in
`torch` package that refuses to import proves that bad input is refused before torch.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO
from trainer import settings
from trainer.cli import build_parser, given, job_overrides, main
from trainer.config import CheckpointConfig, DiagnosticsConfig, JobConfig, ParallelConfig, TrainerConfig
from trainer.errors import UserError
from trainer.runtime.devices import select_devices
from trainer.settings import SETTINGS, Spelling
from trainer.trainer_options import split_options

SAMPLE = {"int": "3", "float": "0.5", "yaml": "[5]", "text": "x", "switch": None}
TYPED = {"int": 3, "float": 0.5, "yaml": [5], "text": "x"}


def _cli(command: str, *words: str):
    return given(build_parser().parse_args([command, *words]))


@pytest.mark.parametrize("item", SETTINGS, ids=lambda s: s.name)
def test_every_setting_reaches_the_cli_parser_under_every_flag(item):
    for command in item.commands:
        for flag in item.flags:
            text = item.choices[0] if item.choices else SAMPLE[item.kind]
            values, spelling = _cli(command, *([flag] if item.kind == "switch" else [flag, text]))
            expected = item.switch if item.kind == "switch" else item.choices[0] if item.choices else TYPED[item.kind]
            assert values == {item.name: expected}
            assert spelling.name(item.name) == flag  # the alias typed, for the error messages
            if item.key is not None:
                assert job_overrides(values) == {item.key: expected}


@pytest.mark.parametrize("item", SETTINGS, ids=lambda s: s.name)
def test_every_setting_has_a_make_variable_per_flag_and_back(item):
    assert len(item.make_names) == len(item.flags)
    for flag, variable in zip(item.flags, item.make_names):
        assert item.flag_for(variable) == flag and item.variable_for(flag) == variable


def test_the_trainer_keywords_are_exactly_the_config_fields():
    sections = {"trainer": TrainerConfig, "checkpoint": CheckpointConfig, "parallel": ParallelConfig,
                "diagnostics": DiagnosticsConfig}
    for section, cls in sections.items():
        in_table = {s.keyword for s in SETTINGS if s.section == section}
        assert in_table == {f.name for f in dataclasses.fields(cls)}, section
    top = {s.key for s in SETTINGS if s.key and s.section is None}
    assert top == {f.name for f in dataclasses.fields(JobConfig)} - set(sections) - {"module_args", "data"}
    from trainer.config import DataConfig

    assert {s.key.partition(".")[2] for s in SETTINGS if s.section == "data"} == \
        {f.name for f in dataclasses.fields(DataConfig)}  # the data: section, by CLI flag and make variable


@pytest.mark.parametrize("item", [s for s in SETTINGS if s.keyword], ids=lambda s: s.name)
def test_every_keyword_and_lightning_alias_lands_in_its_section(item):
    for keyword in item.names("python"):
        if keyword == "accelerator":  # Lightning's values are translated; trainer_options' own test
            continue
        assert split_options({keyword: "v"})[item.section] == {item.name: "v"}


@pytest.mark.parametrize("front_end, used, said, fix", [
    ("python", {}, "devices=3", "Trainer(devices=8)"),
    ("cli", {"devices": "--cores"}, "--cores 3", "tpu-trainer train --cores 8"),
    ("cli", {"devices": "--devices"}, "--devices 3", "tpu-trainer train --devices 8"),
    ("make", {"devices": "CORES"}, "CORES=3", "make train CORES=8"),
    ("make", {"devices": "DEVICES"}, "DEVICES=3", "make train DEVICES=8"),
    ("make", {}, "DEVICES=3", "make train DEVICES=8"),  # not given at all: Lightning's name
])
def test_device_errors_quote_the_alias_used(front_end, used, said, fix):
    with pytest.raises(UserError) as err:
        select_devices(3, 8, Spelling(front_end, used))
    assert str(err.value).startswith(f"{said} is not a valid device selection")
    assert f"`{fix}` for all devices" in str(err.value)


DEVICE_WORDS = [(["--cores", "3"], "--cores 3 is not"), (["--devices", "3"], "--devices 3 is not"),
                (["--cores", "3", "--options-from", "make"], "CORES=3 is not"),
                (["--devices", "3", "--options-from", "make"], "DEVICES=3 is not")]
EPOCH_WORDS = [(["--epochs", "x", "--options-from", "make"], "EPOCHS='x' is not an integer. EPOCHS takes an integer"),
               (["--max-epochs", "x"], "--max-epochs x is not an integer. --max-epochs takes an integer")]


@pytest.mark.parametrize("command, words, said", [("train", *case) for case in DEVICE_WORDS + EPOCH_WORDS]
                         + [("env", *case) for case in DEVICE_WORDS])
def test_the_cli_quotes_the_flag_or_variable_typed(capsys, command, words, said):
    assert main([command, *words, "--env-profile", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"error: {said}" in err
    assert f"{command} " in err.split("Fix:")[-1]  # the fix names the same command


def test_env_and_train_share_the_parser_and_the_default(capsys):
    assert main(["env", "--profile", "cpu"]) == 0
    assert f"export CPU_NUM_DEVICES={TrainerConfig().devices}" in capsys.readouterr().out
    assert main(["env", "--profile", "cpu", "--devices", "[5]"]) == 0
    assert "export CPU_NUM_DEVICES=6" in capsys.readouterr().out  # devices 0..5 exist, device 5 is used
    assert main(["env", "--env-profile", "cpu", "--cores", "auto"]) == 0
    assert "export CPU_NUM_DEVICES=8" in capsys.readouterr().out


# ---- invoke and make


def test_invoke_train_and_env_take_every_flag_of_the_cli():
    import tasks

    for command in ("train", "env"):
        names = {n for arg in getattr(tasks, command).get_arguments() for n in arg.names}
        flags = {f[2:] for s in settings.for_command(command) for f in s.flags}
        assert flags <= names, flags - names


def test_make_variables_are_scoped_per_task():
    from tooling.tasks.variables import resolve

    [train] = resolve("train", ["EPOCHS=3"])
    assert (train.setting.key, train.flag, train.parameter) == ("trainer.max_epochs", "--epochs", "epochs")
    [matrix] = resolve("matrix", ["EPOCHS=3"])
    assert (matrix.setting.key, matrix.parameter) == (None, "max_epochs")
    [bench] = resolve("bench", ["DEVICES=1,8"])
    assert (bench.setting.key, bench.parameter) == (None, "devices")
    [pod] = resolve("pod", ["ARGS=--max-epochs 3"])
    assert pod.parameter == "--" and pod.value == "--max-epochs 3"
    assert resolve("train", ["CORES="]) == []  # empty: not given, as `make train CORES=` always meant


def test_the_tasks_load_without_docker_or_torch():
    code = "import sys, tasks; assert not {'docker', 'torch'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def _make(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """The real make, with this venv; a `torch` that cannot be imported is first on the path."""
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    path = os.pathsep.join(filter(None, [str(fake.parent), os.environ.get("PYTHONPATH")]))
    return subprocess.run(["make", "-s", *args, f"VENV={sys.prefix}"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": path})


def test_make_env_takes_the_device_values_of_train(tmp_path):
    named = _make(tmp_path, "env", "PROFILE=cpu", "DEVICES=[5]")
    assert named.returncode == 0, named.stderr
    assert "export PJRT_DEVICE=CPU\nexport CPU_NUM_DEVICES=6\n" in named.stdout
    every = _make(tmp_path, "env", "DEVICES=auto")
    assert every.returncode == 0 and "export CPU_NUM_DEVICES=8" in every.stdout, every.stderr
    default = _make(tmp_path, "env", "PROFILE=cpu")
    assert f"export CPU_NUM_DEVICES={TrainerConfig().devices}\n" in default.stdout  # train's default


@pytest.mark.parametrize("target, variable", [("train", "DEVICES"), ("train", "CORES"), ("env", "CORES")])
def test_make_refuses_bad_devices_before_torch_in_the_users_spelling(tmp_path, target, variable):
    started = time.perf_counter()
    done = _make(tmp_path, target, f"{variable}=3", *([f"RUN_DIR={tmp_path / 'run'}"] if target == "train" else []))
    assert time.perf_counter() - started < 10
    assert done.returncode == 2
    assert f"error: {variable}=3 is not a valid device selection" in done.stderr
    assert f"`make {target} {variable}=8` for all devices" in done.stderr
    assert "Traceback" not in done.stderr and "torch was imported" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_stand_in_torch_stops_a_run_that_imports_torch(tmp_path):  # negative control for the test above
    done = _make(tmp_path, "train", "DEVICES=1", "MAX_EPOCHS=1", f"RUN_DIR={tmp_path / 'run'}")
    assert done.returncode != 0 and "torch was imported" in done.stderr


def test_make_names_the_nearest_variable_for_an_unknown_one(tmp_path):
    done = _make(tmp_path, "train", "CORSE=8")
    assert done.returncode == 2
    assert "make train does not take CORSE=8. Did you mean CORES=8?" in done.stderr
    assert "DEVICES (or CORES)" in done.stderr and "Traceback" not in done.stderr
    scoped = _make(tmp_path, "bench", "PRECISION=bf16")  # a train variable is not bench's
    assert "make bench does not take PRECISION=bf16." in scoped.stderr


def test_make_types_switches_and_integers_as_the_task_does(tmp_path):
    switch = _make(tmp_path, "train", "DEBUG=maybe")
    assert "DEBUG='maybe' is a switch of make train" in switch.stderr and "Fix: DEBUG=1" in switch.stderr
    number = _make(tmp_path, "bench", "ROUNDS=x")
    assert "ROUNDS='x' is not an integer; make bench takes ROUNDS=N" in number.stderr
    assert switch.returncode == number.returncode == 2 and "Traceback" not in switch.stderr + number.stderr


def test_make_help_lists_each_targets_variables_without_a_venv():
    done = subprocess.run(["make", "-s", "help", "VENV=/nonexistent"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    train = lines[[i for i, line in enumerate(lines) if line.startswith("  train ")][0] + 1]
    assert "DEVICES|CORES" in train and "MAX_EPOCHS|EPOCHS" in train
    assert any(line.startswith("  pod ") for line in lines)
