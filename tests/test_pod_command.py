"""Unit tests of what pod workers are given, and of bad `invoke pod` input (run: `pytest tests/test_pod_command.py`).

No network: these check the per-worker environment, the host list parser, option
validation and the refusal paragraphs of `invoke pod` that need no worker.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pod_probe import ROOT, invoke
from tooling.pod import commands as pc
from tooling.errors import ToolingError
from tooling.pod.launch import plan
from tooling.pod.slice_size import parse_slice_size
from tooling.pod.transports import Host, SshTransport, choose, parse_hosts


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
        "docker run --rm --privileged --net=host --shm-size=16g --name tpu-trainer-pod-j-w1 -e PJRT_DEVICE=TPU "
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
        ({"env": (("MY_SECRET", "x"),)}, "only variables named in trainer/runtime/env_vars.py"),
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
    code = "import sys, tooling.pod.launch, tooling.pod.tpu_clean, tooling.pod.transports; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


@pytest.mark.parametrize(
    ("workers", "accelerator_type", "says"),
    [
        ("0", "", "--workers 0 is not a worker count"),
        ("four", "", "--workers four is not a worker count"),
        ("", "v9-8", "--accelerator-type 'v9-8' is not an accelerator type this launcher knows"),
        ("", "v4-12", "--accelerator-type 'v4-12' is not a slice Cloud TPU makes"),
        ("2", "v4-32", "--workers 2 disagrees with --accelerator-type v4-32, which has 4 worker"),
    ],
)
def test_bad_slice_sizes_are_refused_in_the_users_spelling(workers: str, accelerator_type: str, says: str) -> None:
    with pytest.raises(ToolingError, match=re.escape(says)):
        parse_slice_size(workers, accelerator_type)


def test_slice_size_gives_the_worker_count() -> None:
    assert parse_slice_size().count is None
    assert parse_slice_size("3").count == 3
    assert parse_slice_size("", "v6e-64").count == 16
    assert parse_slice_size("4", "v4-32").count == 4


def test_workers_apply_to_a_cloud_tpu_only() -> None:
    with pytest.raises(ToolingError, match="with --hosts the list itself gives the worker count"):
        choose("", "", "", "h1,h2", "", [], parse_slice_size("2"))


@pytest.mark.parametrize("size", ["16", "0g", "0.0m", "16 g", "16t", "g", "lots"])
def test_bad_shm_sizes_are_refused(size: str) -> None:
    with pytest.raises(ToolingError, match=re.escape(f"--shm-size {size!r} is not a size")):
        pc.PodSpec(job="j", image="reg:5000/tpu-trainer:2.9", shm_size=size)


def test_shm_size_reaches_docker_run() -> None:
    spec = pc.PodSpec(job="j", image="reg:5000/tpu-trainer:2.9", shm_size="512M")
    assert " --net=host --shm-size=512M --name " in pc.train_body(spec, {}, 0)
    assert "--shm-size" not in pc.train_body(pc.PodSpec(job="j", image=None), {}, 0)


@pytest.mark.parametrize(
    ("args", "count", "warns"),
    [
        ((), 4, "No --run-dir was given, so the run writes to runs/ on each worker's local disk"),
        (("--run-dir", "/data/run"), 2, "--run-dir /data/run is on each worker's local disk"),
        (("--run-dir=runs/x",), 2, "--run-dir runs/x is on each worker's local disk"),
        (("--run-dir", "gs://b/x"), 4, None),
        (("--run-dir", "/data/run", "--run-dir", "gs://b/x"), 4, None),  # the last one counts
        ((), 1, None),  # one worker: nothing is split across disks
    ],
)
def test_a_local_run_dir_on_a_multi_worker_pod_warns(args: tuple[str, ...], count: int, warns: str | None) -> None:
    warning = pc.run_dir_warning(pc.PodSpec(job="j", image=None, args=args), count)
    if warns is None:
        assert warning is None
    else:
        assert warning is not None and warns in warning
        assert "lost with a preempted" in warning and "--run-dir gs://BUCKET/runs/NAME" in warning


def test_the_run_dir_warning_through_the_cli() -> None:
    done = invoke("pod", "--hosts", "h1,h2", "--image", "none", "--dry-run", "--", "--run-dir", "/tmp/r")
    assert done.returncode == 0, done.stderr
    assert "[pod] warning: --run-dir /tmp/r is on each worker's local disk. On this 2-worker pod" in done.stderr
    assert "warning" not in done.stdout, "the dry-run output stays the commands"


def test_invoke_run_refuses_a_bad_shm_size_before_docker() -> None:
    from tooling.docker.container import RunSpec

    with pytest.raises(ToolingError, match=re.escape("--shm-size '16' is not a size")):
        RunSpec("tpu-trainer:2.9", ("train",), Path("runs"), tpu=True, shm_size="16")
