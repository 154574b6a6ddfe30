"""Every gcloud command line the launcher builds, parsed by the real gcloud (run: `pytest tests/test_gcloud_argv.py`).

No Cloud TPU is reachable from here, but the real Google Cloud CLI parses its arguments
offline: a bad argv exits 2 with "unrecognized arguments" before any network or account
is needed, while a good one gets as far as the missing account (exit 1). So each command
of a launch (connect, setup, pull, train per worker, stop, describe) and of `tpu-clean`
is run through /usr/bin/gcloud with a fresh, empty configuration directory (never the
user's), and must get past parsing. `tests/test_pod_gcloud.py` checks the same commands'
exact words and behaviour through a recording stand-in; this checks gcloud accepts them.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from pod_probe import invoke
from tooling.pod import commands as pc
from tooling.pod.launch import plan, stop_argv
from tooling.pod.tpu_clean import remote_command
from tooling.pod.transports import GcloudTransport

GCLOUD = Path("/usr/bin/gcloud")
pytestmark = pytest.mark.skipif(
    not GCLOUD.exists(), reason="needs the real Google Cloud CLI at /usr/bin/gcloud (it parses argv offline)"
)

IMAGE = "us-docker.pkg.dev/my-proj/trainer/tpu-trainer:2.9"
TRANSPORTS = {
    "with --project": GcloudTransport("my-pod", "us-central2-b", "my-proj", 4),
    "default project": GcloudTransport("my-pod", "us-central2-b", None, 4),
}


def real_gcloud(argv: list[str], config: Path) -> subprocess.CompletedProcess[str]:
    """Run a launcher argv (`gcloud ...`) through the real CLI with an empty configuration."""
    assert argv[0] == "gcloud", argv
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(config),
        "CLOUDSDK_CONFIG": str(config / "gcloud"),  # never the user's account or project
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
    }
    return subprocess.run([str(GCLOUD), *argv[1:]], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=60)  # fmt: skip


def assert_parsed(argv: list[str], config: Path, what: str = "") -> None:
    done = real_gcloud(argv, config)
    said = f"{what}: {shlex.join(argv)[:300]}...\n{done.stderr}"
    assert done.returncode != 2 and "unrecognized arguments" not in done.stderr, said
    # Past parsing, it stops at what this machine lacks: an account (or a project).
    assert done.returncode == 1 and "ERROR: (gcloud.compute.tpus.tpu-vm." in done.stderr, said


def launch_argvs(transport: GcloudTransport) -> dict[str, list[str]]:
    """Each kind of command one launch runs, from the launcher's own functions."""
    spec = pc.PodSpec(job="argv-check", args=("--max-epochs", "1", "--run-dir", "gs://b/runs/x"),
                      image=IMAGE, setup="echo 'setting up' \"$TPU_TRAINER_PROCESS_INDEX\"\n",
                      env=(("XLA_USE_BF16", "1"),), volumes=("/data:/data:ro",))  # fmt: skip
    phases = {phase.name: phase.commands for phase in plan(spec, transport)}
    last = transport.count - 1
    return {
        "connect": list(phases["connect"][0]),
        "setup worker 0": list(phases["setup"][0]),
        "pull worker 0": list(phases["pull"][0]),
        "train worker 0": list(phases["train"][0]),
        f"train worker {last}": list(phases["train"][last]),
        "stop worker 1": stop_argv(spec, transport, 1),
        "describe": transport.describe_argv(),
        "tpu-clean worker 2": transport.argv(2, remote_command(10.0, list_only=True, sudo=True)),
    }


@pytest.mark.parametrize("where", TRANSPORTS)
def test_every_command_of_a_launch_gets_past_gclouds_parser(where: str, tmp_path: Path) -> None:
    for name, argv in launch_argvs(TRANSPORTS[where]).items():
        assert_parsed(argv, tmp_path, name)


def test_what_dry_run_prints_is_what_gcloud_accepts(tmp_path: Path) -> None:
    done = invoke("pod", "--tpu", "my-pod", "--zone", "us-central2-b", "--image", IMAGE, "--workers", "2",
                  "--dry-run", "--", "--max-epochs", "1", "--run-dir", "gs://b/runs/x")  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = [line.split("] ", 1)[1] for line in done.stdout.splitlines() if "] gcloud " in line]
    assert len(printed) == 1 + 2 + 2  # connect, then pull and train on each of 2 workers
    for line in printed:
        assert_parsed(shlex.split(line), tmp_path, "printed by --dry-run")


def test_negative_control_a_wrong_flag_is_refused_by_the_parser(tmp_path: Path) -> None:
    # Proves the check can fail: the same connect command with one misspelt flag.
    argv = TRANSPORTS["with --project"].all_workers_argv("true")
    wrong = [("--wrker=all" if word == "--worker=all" else word) for word in argv]
    done = real_gcloud(wrong, tmp_path)
    assert done.returncode == 2 and "unrecognized arguments: --wrker=all" in done.stderr, done.stderr
    assert_parsed(argv, tmp_path)
