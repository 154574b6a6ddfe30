"""Unit tests of what pod workers are given, and of bad `invoke pod` input (run: `pytest tests/test_pod_command.py`).

No network: these check the per-worker environment, the host list parser, option
validation and the refusal paragraphs of `invoke pod` that need no worker.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from pod_probe import ROOT, invoke
from tooling import pod_command as pc
from tooling.errors import ToolingError
from tooling.pod import plan
from tooling.transports import Host, SshTransport, choose, parse_hosts


def test_each_of_four_workers_gets_its_index_the_count_and_the_image() -> None:
    spec = pc.PodSpec(job="j", args=("--max-epochs", "1"), image="reg.example/tpu-trainer:2.9")
    hosts = ("w0", "w1", "w2", "w3")
    envs = [pc.worker_env(spec, i, 4, hosts) for i in range(4)]
    for i, env in enumerate(envs):
        assert env == {
            "PJRT_DEVICE": "TPU",
            "TPU_TRAINER_PROCESS_INDEX": str(i),
            "TPU_TRAINER_PROCESS_COUNT": "4",
            "TPU_WORKER_ID": str(i),
            "TPU_WORKER_HOSTNAMES": "w0,w1,w2,w3",
            "TPU_TRAINER_IMAGE": "reg.example/tpu-trainer:2.9",
        }
    # Cloud TPU VMs: the runtime learns worker id and peers from the metadata server.
    assert "TPU_WORKER_ID" not in pc.worker_env(spec, 2, 4, None)


def test_train_phase_runs_the_same_args_everywhere_with_allowlisted_extra_env() -> None:
    spec = pc.PodSpec(job="j", args=("--precision", "bf16"), image="reg:5000/tpu-trainer:2.9",
                      env=(("XLA_USE_BF16", "1"),))  # fmt: skip
    transport = SshTransport(parse_hosts("a,b"))
    train = plan(spec, transport)[-1]
    assert train.name == "train"
    assert train.bodies[1] == (
        "docker run --rm --privileged --net=host --name tpu-trainer-pod-j-w1 -e PJRT_DEVICE=TPU "
        "-e TPU_TRAINER_IMAGE=reg:5000/tpu-trainer:2.9 -e TPU_TRAINER_PROCESS_COUNT=2 "
        "-e TPU_TRAINER_PROCESS_INDEX=1 -e TPU_WORKER_HOSTNAMES=a,b -e TPU_WORKER_ID=1 "
        "-e XLA_USE_BF16=1 reg:5000/tpu-trainer:2.9 train --precision bf16"
    )
    assert [p.name for p in plan(spec, transport)] == ["connect", "pull", "train"]
    assert [p.name for p in plan(pc.PodSpec(job="j", image=None, setup="true"), transport)] == [
        "connect", "setup", "train",
    ]  # fmt: skip


def test_host_list_parsing() -> None:
    assert parse_hosts(" me@10.0.0.3:2222 , tpu-w1,[::1]:22") == (
        Host("me@10.0.0.3:2222", "10.0.0.3", "me", 2222),
        Host("tpu-w1", "tpu-w1"),
        Host("[::1]:22", "::1", None, 22),
    )
    ssh = SshTransport(parse_hosts("me@h:2222"), ("-i", "k"))
    assert ssh.argv(0, "true")[-5:] == ["-i", "k", "-p", "2222", "me@h", "true"][-5:]


@pytest.mark.parametrize(
    ("hosts", "says"),
    [
        ("", "lists no hosts"),
        (" , ", "lists no hosts"),
        ("h1,h1", "more than once"),
        ("h1:99999", "is not [user@]host[:port]"),
        ("a b", "is not [user@]host[:port]"),
    ],
)
def test_bad_host_lists_are_refused(hosts: str, says: str) -> None:
    with pytest.raises(ToolingError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_hosts(hosts)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"job": "Bad_Name"}, "Job name 'Bad_Name' is not allowed"),
        ({"env": (("TPU_TRAINER_PROCESS_INDEX", "3"),)}, "the launcher sets"),
        ({"env": (("MY_SECRET", "x"),)}, "only variables named in trainer/env_vars.py"),
        ({"volumes": ("/data",)}, "HOST:CONTAINER"),
        ({"grace_seconds": 0}, "at least 1 second"),
        ({"image": "tpu-trainer:2.9"}, "names no registry"),
        ({"setup": "x" * (pc.MAX_SETUP_BYTES + 1)}, "fetch what it needs"),
    ],
)
def test_bad_specs_are_refused(kwargs: dict, says: str) -> None:
    with pytest.raises(ToolingError, match=says):
        pc.PodSpec(**{"job": "j", "image": "reg:5000/tpu-trainer:2.9", **kwargs})


def test_an_image_without_registry_needs_no_pull() -> None:
    done = invoke("pod", "--hosts", "h1", "--dry-run", "--", "--max-epochs", "1")
    assert done.returncode == 1
    assert "--image 'tpu-trainer:2.9' names no registry" in " ".join(done.stderr.split())
    done = invoke("pod", "--hosts", "h1", "--dry-run", "--no-pull", "--", "--max-epochs", "1")
    assert done.returncode == 0, done.stderr
    assert "# phase pull" not in done.stdout and "tpu-trainer:2.9 train --max-epochs 1" in done.stdout


def test_exactly_one_of_tpu_or_hosts() -> None:
    with pytest.raises(ToolingError, match="exactly one of --tpu"):
        choose("", "", "", "", "", [])
    with pytest.raises(ToolingError, match="exactly one of --tpu"):
        choose("pod", "z", "", "h1", "", [])
    with pytest.raises(ToolingError, match="go with --tpu"):
        choose("", "us-central2-b", "", "h1", "", [])


def test_empty_host_list_through_the_cli_is_one_clear_paragraph() -> None:
    done = invoke("pod", "--hosts", ",", "--image", "none", "--", "--max-epochs", "1")
    assert done.returncode == 1
    assert "lists no hosts" in done.stderr and "[user@]host[:port]" in done.stderr
    assert "Traceback" not in done.stderr


def test_unreadable_setup_script_through_the_cli() -> None:
    done = invoke("pod", "--hosts", "h1", "--image", "none", "--setup", "/nonexistent/setup.sh", "--dry-run")
    assert done.returncode == 1
    assert "--setup '/nonexistent/setup.sh' cannot be read" in done.stderr


def test_the_launcher_imports_no_torch() -> None:
    # `invoke pod` refuses bad input in milliseconds; importing torch_xla takes seconds.
    code = "import sys, tooling.pod, tooling.tpu_clean, tooling.transports; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
