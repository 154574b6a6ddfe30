"""`invoke pod --tpu` through a recording stand-in for `gcloud` (run: `pytest tests/test_pod_gcloud.py`).

The real gcloud cannot reach a Cloud TPU from here. The stand-in, first on PATH, appends
its argv (JSON) to a record file so the tests can assert the exact gcloud commands, then
does what gcloud would: `describe` prints a node (or gcloud's real NOT_FOUND error), and
`ssh --command=C` runs C locally with bash, so the command a TPU worker would run is
itself run (the probe from `pod_probe` stands in for the engine).
"""
from __future__ import annotations

import json
import shlex
import sys
import uuid
from pathlib import Path

import pytest

from pod_probe import alive, env_with_path, invoke, pids, write_probe

STANDIN = r'''#!@PYTHON@
"""Recording stand-in for gcloud, written by tests/test_pod_gcloud.py."""
import json, os, subprocess, sys

argv = sys.argv[1:]
with open(os.environ["GCLOUD_STANDIN_RECORD"], "a") as f:
    f.write(json.dumps(argv) + "\n")
pods = json.loads(os.environ.get("GCLOUD_STANDIN_PODS", "{}"))
if argv[:3] != ["compute", "tpus", "tpu-vm"] or argv[3] not in ("describe", "ssh"):
    sys.exit("gcloud stand-in: unsupported command")
verb, name = argv[3], argv[4]
opts = dict(a[2:].split("=", 1) for a in argv[5:] if a.startswith("--") and "=" in a)
project, zone = opts.get("project", "standin-project"), opts["zone"]
if name not in pods:  # gcloud 528's wording for a missing node
    resource = f"projects/{project}/locations/{zone}/nodes/{name}"
    sys.stderr.write(
        f"ERROR: (gcloud.compute.tpus.tpu-vm.{verb}) NOT_FOUND: Resource '{resource}' was not "
        "found. This command is authenticated as standin@example.com which is the active "
        f"account specified by the [core/account] property\n"
        f"- '@type': type.googleapis.com/google.rpc.ResourceInfo\n  resourceName: {resource}\n"
    )
    sys.exit(1)
pod = pods[name]
if verb == "describe":
    print(json.dumps({
        "name": f"projects/{project}/locations/{zone}/nodes/{name}",
        "acceleratorType": "v4-32", "state": pod.get("state", "READY"),
        "networkEndpoints": [{"ipAddress": f"10.0.0.{i + 2}", "port": 8470} for i in range(pod["workers"])],
    }))
    sys.exit(0)
if opts["worker"] == "all":
    codes = [subprocess.call(["bash", "-c", opts["command"]]) for _ in range(pod["workers"])]
    sys.exit(next((c for c in codes if c), 0))
os.execvp("bash", ["bash", "-c", opts["command"]])
'''

PODS = {"my-pod": {"workers": 4}, "old-pod": {"workers": 2, "state": "PREEMPTED"}}
WHERE = ["--zone=us-central2-b", "--project=my-proj"]


@pytest.fixture
def standin(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """PATH with the stand-in first; the record file it appends to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(STANDIN.replace("@PYTHON@", sys.executable))
    gcloud.chmod(0o755)
    record = tmp_path / "gcloud-argv.jsonl"
    env = env_with_path(bin_dir)
    env.update(GCLOUD_STANDIN_RECORD=str(record), GCLOUD_STANDIN_PODS=json.dumps(PODS))
    return env, record


def records(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


IMAGE = "us-docker.pkg.dev/my-proj/trainer/tpu-trainer:2.9"


def pod(env: dict[str, str], *args: str, tpu: str = "my-pod", image: str = IMAGE):
    return invoke("pod", "--tpu", tpu, "--zone", "us-central2-b", "--project", "my-proj",
                  "--image", image, *args, env=env)  # fmt: skip


def job_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_gcloud_stand_in_gets_exact_argv_and_runs_each_workers_command(standin, tmp_path: Path) -> None:
    env, record = standin
    probe, job = write_probe(tmp_path), job_name()
    done = pod(env, "--entrypoint", str(probe), "--job", job, "--", "--max-epochs", "2", image="none")
    assert done.returncode == 0, done.stderr
    calls = records(record)
    ssh = ["compute", "tpus", "tpu-vm", "ssh", "my-pod", *WHERE]
    assert calls[0] == ["compute", "tpus", "tpu-vm", "describe", "my-pod", *WHERE, "--format=json"]
    assert calls[1] == [*ssh, "--worker=all", "--command=true"]
    workers = sorted(calls[2:], key=lambda argv: argv[len(ssh)])
    assert len(workers) == 4
    for i, argv in enumerate(workers):
        assert argv[: len(ssh) + 1] == [*ssh, f"--worker={i}"] and len(argv) == len(ssh) + 2
        command = argv[-1].removeprefix("--command=")
        assert command.startswith("bash -c ")
        assert (
            f"( exec env PJRT_DEVICE=TPU TPU_TRAINER_PROCESS_COUNT=4 TPU_TRAINER_PROCESS_INDEX={i} "
            f"{probe} train --max-epochs 2 )"
        ) in command
        assert f'echo $job > "$HOME"/.cache/tpu-trainer/pod-{job}-w{i}.pid' in command
        # On Cloud TPU VMs the runtime reads the worker id and peers from metadata.
        assert (
            f"[worker {i}] probe args=[train --max-epochs 2] index={i} count=4 pjrt=TPU "
            "worker_id=unset hosts=unset image=unset\n"
        ) in done.stdout
    dry = pod(env, "--entrypoint", str(probe), "--job", job, "--dry-run", "--", "--max-epochs", "2", image="none")
    for argv in workers:  # --dry-run prints exactly what was run
        assert f"gcloud {shlex.join(argv)}\n" in dry.stdout


def test_dry_run_prints_each_workers_docker_command_and_runs_nothing(standin) -> None:
    env, record = standin
    image = IMAGE
    done = pod(env, "--job", "demo", "--dry-run", "--volume", "/data/ckpt:/ckpt", "--", "--max-epochs", "3")
    assert done.returncode == 0, done.stderr
    for i in range(4):
        assert (
            f"[worker {i}] # runs: docker run --rm --privileged --net=host --shm-size=16g --name tpu-trainer-pod-demo-w{i} "
            f"-e PJRT_DEVICE=TPU -e TPU_TRAINER_IMAGE={image} -e TPU_TRAINER_PROCESS_COUNT=4 "
            f"-e TPU_TRAINER_PROCESS_INDEX={i} -v /data/ckpt:/ckpt {image} train --max-epochs 3\n"
        ) in done.stdout
        assert f"[worker {i}] # runs: docker pull {image}\n" in done.stdout
    assert [c[3] for c in records(record)] == ["describe"], "dry run must only describe the TPU"


def test_failing_worker_stops_the_others_through_gcloud(standin, tmp_path: Path) -> None:
    env, record = standin
    probe, job = write_probe(tmp_path), job_name()
    done = pod(env, "--entrypoint", str(probe), "--job", job, "--grace", "1",
               "--", "--hang", "--fail-worker", "3", image="none")  # fmt: skip
    assert done.returncode == 1
    assert "Training failed on worker 3 (my-pod worker 3) with exit code 3" in done.stderr
    assert "The other 3 worker(s) were stopped." in done.stderr
    assert not any(alive(pid) for pid in pids(tmp_path).values())
    stops = [c for c in records(record) if c[3] == "ssh" and f'pg=$(cat "$HOME"/.cache/tpu-trainer/pod-{job}-w' in c[-1]]
    assert sorted(c[len(["compute", "tpus", "tpu-vm", "ssh", "my-pod", *WHERE])] for c in stops) == [
        "--worker=0", "--worker=1", "--worker=2",
    ]  # fmt: skip


def test_unknown_tpu_name_reports_gclouds_not_found(standin) -> None:
    env, record = standin
    done = pod(env, "--", "--max-epochs", "1", tpu="no-such-pod")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "TPU 'no-such-pod' was not found in zone 'us-central2-b' of project 'my-proj'" in message
    assert "NOT_FOUND: Resource 'projects/my-proj/locations/us-central2-b/nodes/no-such-pod' was not found" in message
    assert "gcloud compute tpus tpu-vm list --zone=us-central2-b" in message
    assert "Traceback" not in done.stderr
    assert len(records(record)) == 1


def test_preempted_tpu_is_refused(standin) -> None:
    env, _ = standin
    done = pod(env, "--", "--max-epochs", "1", tpu="old-pod")
    assert done.returncode == 1
    assert "TPU 'old-pod' is PREEMPTED" in done.stderr


def test_missing_gcloud_is_a_clear_error(tmp_path: Path) -> None:
    done = pod(env_with_path(path=str(tmp_path)), "--", "--max-epochs", "1")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "`gcloud` was not found on PATH" in message and "--hosts" in message
    assert "Traceback" not in done.stderr


def test_tpu_clean_runs_the_cleaner_on_every_worker(standin) -> None:
    env, record = standin
    done = invoke("tpu-clean", "--tpu", "my-pod", "--zone", "us-central2-b", "--list-only", env=env)
    assert done.returncode == 0, done.stderr
    calls = [c for c in records(record) if c[3] == "ssh"]
    assert sorted(c[6] for c in calls) == [f"--worker={i}" for i in range(4)]
    assert all(c[7].startswith("--command=python3 -c ") and c[7].endswith(" --grace 10.0 --list-only") for c in calls)
    for i in range(4):
        assert f"[worker {i}] " in done.stdout


@pytest.mark.parametrize("size", [["--workers", "4"], ["--accelerator-type", "v4-32"], ["--accelerator-type", "v5litepod-16"]])
def test_dry_run_with_a_known_size_needs_no_gcloud_at_all(tmp_path: Path, size: list[str]) -> None:
    # PATH holds no gcloud (nor anything else): no credentials, no network, nothing to call.
    done = pod(env_with_path(path=str(tmp_path)), *size, "--job", "demo", "--dry-run", "--", "--max-epochs", "3")
    assert done.returncode == 0, done.stderr
    assert f"# TPU my-pod: 4 worker(s) (from {' '.join(size)}; gcloud was not called)\n" in done.stdout
    for i in range(4):
        assert (
            f"[worker {i}] # runs: docker run --rm --privileged --net=host --shm-size=16g "
            f"--name tpu-trainer-pod-demo-w{i} -e PJRT_DEVICE=TPU -e TPU_TRAINER_IMAGE={IMAGE} "
            f"-e TPU_TRAINER_PROCESS_COUNT=4 -e TPU_TRAINER_PROCESS_INDEX={i} {IMAGE} train --max-epochs 3\n"
        ) in done.stdout
        assert f"[worker {i}] gcloud compute tpus tpu-vm ssh my-pod {' '.join(WHERE)} --worker={i} '--command=" in done.stdout
    assert "[worker 4]" not in done.stdout


def test_dry_run_without_a_size_asks_gcloud_and_says_how_to_avoid_it(standin) -> None:
    env, record = standin
    done = pod(env, "--dry-run", "--", "--max-epochs", "1")
    assert done.returncode == 0, done.stderr
    assert [c[3] for c in records(record)] == ["describe"]
    assert (
        "# TPU my-pod: 4 worker(s) (asked `gcloud compute tpus tpu-vm describe my-pod "
        f"{' '.join(WHERE)} --format=json`;"
    ) in done.stdout
    assert "--workers N or --accelerator-type TYPE (e.g. v4-32) gives the worker count without gcloud" in done.stdout
    # ...and when gcloud cannot answer, the error says it too.
    failed = pod(env_with_path(path=str(Path(sys.executable).parent)), "--dry-run", "--", "--max-epochs", "1")
    message = " ".join(failed.stderr.split())
    assert failed.returncode == 1 and "`gcloud` was not found on PATH" in message
    assert "gives the worker count without gcloud, so --dry-run needs no credentials and no network" in message


def test_workers_must_agree_with_gcloud_when_launching(standin) -> None:
    env, record = standin
    done = pod(env, "--workers", "3", "--", "--max-epochs", "1")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "--workers 3 disagrees with gcloud, which says TPU 'my-pod' is a v4-32 with 4 worker(s)" in message
    assert "e.g. --workers 4" in message and "Traceback" not in done.stderr
    assert [c[3] for c in records(record)] == ["describe"], "nothing may start on a disagreement"
    done = pod(env, "--accelerator-type", "v4-8", "--", "--max-epochs", "1")
    assert done.returncode == 1
    assert "--accelerator-type v4-8 disagrees with gcloud" in " ".join(done.stderr.split())


def test_a_matching_size_launches_as_usual(standin, tmp_path: Path) -> None:
    env, record = standin
    probe = write_probe(tmp_path)
    done = pod(env, "--workers", "4", "--entrypoint", str(probe), "--", "--run-dir", "gs://b/r", image="none")
    assert done.returncode == 0, done.stderr
    assert "finished on all 4 worker(s)" in done.stdout
    assert "warning" not in done.stderr, "a gs:// run directory needs no warning"
