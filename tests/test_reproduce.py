"""`invoke reproduce` and the run manifest, without training (the end-to-end run is in test_resume.py).

`pytest tests/test_reproduce.py` (about a second).
"""
from __future__ import annotations

import pytest

from tooling.errors import ToolingError
from tooling.reproduce import compare, job_for_reproduction, read_manifest
from trainer.runtime import env_vars
from trainer.outputs.run_manifest import git_state, image_state

HEADER = "global_step,epoch,loss\n"


def _steps(path, rows):
    path.write_text(HEADER + "".join(f"{s},{e},{l!r}\n" for s, e, l in rows))
    return path


def test_compare_accepts_only_bitwise_equal_losses(tmp_path):
    x = 2.3023838996887207
    a = _steps(tmp_path / "a.csv", [(1, 1, x), (2, 1, 1.5)])
    assert compare(a, _steps(tmp_path / "b.csv", [(1, 1, x), (2, 1, 1.5)])).equal
    one_ulp = _steps(tmp_path / "c.csv", [(1, 1, x), (2, 1, 1.5000000000000002)])
    result = compare(a, one_ulp)
    assert not result.equal and "first at step 2" in result.describe()
    shorter = compare(a, _steps(tmp_path / "d.csv", [(1, 1, x)]))
    assert not shorter.equal and shorter.first_difference == (("2", "1", "1.5"), None)


def test_the_reproduced_job_starts_fresh_in_its_own_directory_with_the_recorded_profile():
    manifest = {"env_profile": "cpu", "job": {"module": "m:C", "module_args": {"lr": 0.1}, "checkpoint": {},
                                               "trainer": {"run_dir": "/old", "resume": "auto", "seed": 3,
                                                           "progress_bar": True, "env_profile": "auto"}}}
    job = job_for_reproduction(manifest)
    assert job["trainer"] == {"run_dir": "", "resume": "", "seed": 3, "progress_bar": False, "env_profile": "cpu"}
    assert manifest["job"]["trainer"]["resume"] == "auto"  # the manifest itself is untouched


def test_a_directory_without_a_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(ToolingError, match="not a tpu-trainer run directory"):
        read_manifest(tmp_path)


def test_image_and_git_facts(tmp_path):
    assert image_state({}) is None
    assert image_state({env_vars.TPU_TRAINER_IMAGE: "tpu-trainer:2.9"}) == {"tag": "tpu-trainer:2.9", "digest": None}
    assert git_state(tmp_path) is None  # not a checkout: null, not a guess
