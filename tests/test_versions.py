"""env/versions.yaml and its lock files: fast, no Docker. Run: `.venv/bin/pytest tests/test_versions.py`."""
from __future__ import annotations

import pytest

from tooling.errors import ToolingError
from tooling.versions import REPO_ROOT, default_key, get_pair, load_pairs


def test_every_pair_is_matched_and_locked():
    pairs = load_pairs()
    assert {"2.9", "2.8"} <= set(pairs)
    assert (pairs["2.9"].torch, pairs["2.9"].torch_xla) == ("2.9.0", "2.9.0")
    assert (pairs["2.8"].torch, pairs["2.8"].torch_xla) == ("2.8.0", "2.8.1")
    for pair in pairs.values():
        pins = dict(line.split("==", 1) for line in pair.constraints_file.read_text().splitlines()
                    if "==" in line and not line.startswith("#"))
        # The lock must agree with versions.yaml, or pip refuses the build's explicit pins.
        assert pins["torch"] == pair.torch, pair.key
        assert pins["torch-xla"] == pair.torch_xla, pair.key
        assert all(v.strip() for v in pins.values())


def test_default_pair_exists():
    assert default_key() in load_pairs()


def test_unknown_version_names_the_choices_and_the_fix():
    with pytest.raises(ToolingError) as err:
        get_pair("9.9")
    message = str(err.value)
    assert "'9.9'" in message and "2.8, 2.9" in message and "--version" in message
    assert "\n" not in message


def test_mismatched_pair_is_refused(tmp_path):
    bad = tmp_path / "versions.yaml"
    bad.write_text('default: "x"\npairs:\n  "x": {torch: "2.9.0", torch_xla: "2.8.1", '
                   'python: "3.11", libtpu: "0.0.21"}\n')
    with pytest.raises(ToolingError, match="major.minor must match"):
        load_pairs(bad)


def test_dockerfile_passes_hadolint():
    import shutil
    import subprocess

    hadolint = shutil.which("hadolint") or str(REPO_ROOT / ".venv" / "bin" / "hadolint")
    done = subprocess.run([hadolint, "--failure-threshold", "warning", str(REPO_ROOT / "Dockerfile")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _stale_defaults(makefile: str, dockerfile: str) -> list[str]:
    """Where the files that cannot read YAML disagree with env/versions.yaml's default pair."""
    import re

    pair = get_pair(default_key())
    wanted = {"PAIR": pair.key, "TORCH_VERSION": pair.torch, "TORCH_XLA_VERSION": pair.torch_xla,
              "LIBTPU_VERSION": pair.libtpu, "BASE_IMAGE": pair.default_base_image}
    found = [("Makefile", "PAIR", v) for v in re.findall(r"^PAIR\s*\?=\s*(\S+)$", makefile, re.M)]
    found += [("Dockerfile", k, v) for k, v in re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.M) if k in wanted]
    assert {k for _, k, _ in found} == set(wanted), found  # every default is still where we look
    return [f"{where}: {k}={v}, but env/versions.yaml says {wanted[k]}" for where, k, v in found if v != wanted[k]]


def test_the_makefile_and_dockerfile_defaults_are_the_default_pair():
    makefile, dockerfile = (REPO_ROOT / "Makefile").read_text(), (REPO_ROOT / "Dockerfile").read_text()
    assert _stale_defaults(makefile, dockerfile) == []
    # Negative control: a Makefile left on another pair is caught.
    other = next(key for key in load_pairs() if key != default_key())
    stale = makefile.replace(f"PAIR   ?= {default_key()}", f"PAIR   ?= {other}")
    assert _stale_defaults(stale, dockerfile) == [f"Makefile: PAIR={other}, but env/versions.yaml says {default_key()}"]


def test_the_engine_reads_the_same_default_pair():
    from trainer.runtime.startup import default_pair
    from tooling.versions import default_image

    assert default_pair() == default_key()
    assert default_image() == f"tpu-trainer:{default_key()}"
