"""`invoke pod --hosts` against real sshd servers on 127.0.0.1 (run: `pytest -m ssh tests/test_pod_ssh.py`).

Three sshd servers stand for three hosts; each worker runs the probe from `pod_probe`
through the real launcher, ssh client, sshd, shells and signals.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pod_probe import ROOT, alive, invoke, pids, write_probe
from sshd_server import SshLab, free_port, lab

pytestmark = pytest.mark.ssh


@pytest.fixture(scope="module")
def ssh_lab(tmp_path_factory: pytest.TempPathFactory):
    yield from lab(tmp_path_factory.mktemp("sshd"), servers=3)


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    write_probe(tmp_path)
    return tmp_path


def pod(ssh_lab: SshLab, probe_dir: Path, *args: str, hosts: str | None = None, timeout: float = 120):
    return invoke(
        "pod", "--hosts", hosts or ssh_lab.hosts(), *ssh_lab.options(),
        "--image", "none", "--entrypoint", str(probe_dir / "probe"), *args, timeout=timeout,
    )  # fmt: skip


def test_every_worker_runs_the_same_args_with_its_own_index(ssh_lab: SshLab, probe_dir: Path) -> None:
    done = pod(ssh_lab, probe_dir, "--", "--max-epochs", "1", "--set", "data.name=digits")
    assert done.returncode == 0, done.stderr
    names = ",".join(["127.0.0.1"] * 3)
    for i in range(3):
        assert (
            f"[worker {i}] probe args=[train --max-epochs 1 --set data.name=digits] index={i} "
            f"count=3 pjrt=TPU worker_id={i} hosts={names} image=unset\n"
        ) in done.stdout
    assert "[pod] job" in done.stdout and "finished on all 3 worker(s)" in done.stdout


def test_one_failing_worker_stops_the_rest_and_fails_the_command(ssh_lab: SshLab, probe_dir: Path) -> None:
    # Worker 1 crashes after 1 s; worker 0 hangs; worker 2 hangs and ignores SIGTERM, so
    # stopping it needs the SIGKILL after the 1 s grace.
    start = time.monotonic()
    done = pod(ssh_lab, probe_dir, "--grace", "1", "--",
               "--hang", "--fail-worker", "1", "--ignore-term-worker", "2")  # fmt: skip
    took = time.monotonic() - start
    assert done.returncode == 1
    assert f"Training failed on worker 1 ({ssh_lab.hosts([ssh_lab.ports[1]])}) with exit code 3" in done.stderr
    assert "worker 1: simulated crash" in done.stderr
    assert "The other 2 worker(s) were stopped." in done.stderr
    assert "[worker 1] worker 1: simulated crash" in done.stdout
    assert "Traceback" not in done.stderr
    started = pids(probe_dir)
    assert sorted(started) == [0, 1, 2]
    assert not any(alive(pid) for pid in started.values()), "a remote worker survived the stop"
    assert took < 30, f"stopping the rest took {took:.1f} s"


def test_unreachable_host_is_a_clear_error_before_anything_starts(ssh_lab: SshLab, probe_dir: Path) -> None:
    closed = free_port()
    hosts = ssh_lab.hosts([ssh_lab.ports[0]]) + f",127.0.0.1:{closed}"
    done = pod(ssh_lab, probe_dir, "--", "--max-epochs", "1", hosts=hosts)
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert f"Could not reach worker 1 (127.0.0.1:{closed}) during connect (exit 255)" in message
    assert "Connection refused" in message
    assert "check that the host is up" in message and "must work without a prompt" in message
    assert pids(probe_dir) == {}, "training started although a worker was unreachable"


def test_setup_runs_on_every_worker_before_training(ssh_lab: SshLab, probe_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "setup.sh"
    script.write_text(f'echo "setting up $TPU_TRAINER_PROCESS_INDEX"\ntouch {probe_dir}/ready-$TPU_TRAINER_PROCESS_INDEX\n')
    done = pod(ssh_lab, probe_dir, "--setup", str(script), "--", "--max-epochs", "1")
    assert done.returncode == 0, done.stderr
    for i in range(3):
        assert f"[worker {i}] setting up {i}\n" in done.stdout
        assert (probe_dir / f"ready-{i}").exists()
    assert done.stdout.index("[pod] setup") < done.stdout.index("[pod] train")


def test_failing_setup_stops_before_training(ssh_lab: SshLab, probe_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "setup.sh"
    script.write_text('if [ "$TPU_TRAINER_PROCESS_INDEX" = 2 ]; then echo "no data here" >&2; exit 7; fi\n')
    done = pod(ssh_lab, probe_dir, "--setup", str(script), "--", "--max-epochs", "1")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "The setup script failed on worker 2" in message and "exit code 7: no data here" in message
    assert pids(probe_dir) == {}


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker client on PATH")
def test_image_not_pushed_fails_on_pull_before_training(ssh_lab: SshLab, probe_dir: Path) -> None:
    # Nothing listens on 127.0.0.1:<closed>, so no registry has this image; real `docker
    # pull` on each worker fails (whether or not a Docker daemon runs here).
    image = f"127.0.0.1:{free_port()}/tpu-trainer:never-pushed"
    done = invoke("pod", "--hosts", ssh_lab.hosts(), *ssh_lab.options(), "--image", image, "--", "--max-epochs", "1")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert f"could not pull image '{image}'" in message
    assert "push it to a registry the workers can reach" in message
    assert "[pod] train" not in done.stdout


def test_tpu_clean_runs_on_every_host(ssh_lab: SshLab) -> None:
    done = invoke("tpu-clean", "--hosts", ssh_lab.hosts(), *ssh_lab.options(), "--list-only")
    assert done.returncode == 0, done.stderr
    for i in range(3):
        assert f"[worker {i}] " in done.stdout


def start_hanging_pod(ssh_lab: SshLab, probe_dir: Path) -> subprocess.Popen:
    """`invoke pod` over the 3 hosts with a probe that hangs; returns once every worker runs it."""
    command = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "pod", "--hosts", ssh_lab.hosts(),
               *ssh_lab.options(), "--image", "none", "--entrypoint", str(probe_dir / "probe"),
               "--grace", "1", "--", "--hang"]  # fmt: skip
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(pids(probe_dir)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    return launcher


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_launcher_stops_every_worker(ssh_lab: SshLab, probe_dir: Path, sig: int) -> None:
    launcher = start_hanging_pod(ssh_lab, probe_dir)
    assert len(pids(probe_dir)) == 3, "the workers did not start"
    launcher.send_signal(sig)
    stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 1, stderr
    assert "Interrupted during train: job" in stderr and "stopped on all 3 worker(s)" in stderr
    assert not any(alive(pid) for pid in pids(probe_dir).values()), "a worker outlived the launcher"


@pytest.mark.slow
def test_the_real_engine_trains_through_the_launcher(ssh_lab: SshLab, tmp_path: Path) -> None:
    # One worker: XLA on CPU is single-process, so only a one-host "pod" can really train here.
    run_dir = tmp_path / "run"
    done = invoke(
        "pod", "--hosts", ssh_lab.hosts([ssh_lab.ports[0]]), *ssh_lab.options(), "--image", "none",
        "--entrypoint", f"{sys.executable} -m trainer", "--env", "PJRT_DEVICE=CPU",
        "--", "--max-epochs", "1", "--run-dir", str(run_dir), "--no-progress", timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "[worker 0] done: " in done.stdout and f"outputs in {run_dir}" in done.stdout
    assert (run_dir / "summary.json").exists()


def test_a_dropped_connection_fails_the_job_and_its_orphaned_worker_is_stopped(ssh_lab: SshLab, probe_dir: Path) -> None:
    launcher = start_hanging_pod(ssh_lab, probe_dir)
    probe = pids(probe_dir)[1]
    # probe <- wrapper bash <- sshd session process: killing that drops worker 1's connection
    # while its job keeps running, as a network failure would.
    wrapper = int(Path(f"/proc/{probe}/stat").read_text().rsplit(")", 1)[1].split()[1])
    session = int(Path(f"/proc/{wrapper}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert "sshd" in Path(f"/proc/{session}/comm").read_text()
    os.kill(session, signal.SIGKILL)
    stdout, stderr = launcher.communicate(timeout=60)
    assert launcher.returncode == 1
    assert "Lost the connection to worker 1" in stderr and "during train (exit 255)" in stderr
    assert "The other 2 worker(s) were stopped." in stderr
    assert not any(alive(pid) for pid in pids(probe_dir).values()), "the orphaned job outlived the launch"


def test_a_refused_key_names_the_fix(ssh_lab: SshLab, probe_dir: Path, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    options = [o if o != str(ssh_lab.key) else str(tmp_path / "other") for o in ssh_lab.options()]
    done = invoke("pod", "--hosts", ssh_lab.hosts(), *options, "--image", "none", "--", "--x")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "Could not reach worker " in message and "during connect (exit 255)" in message
    assert "Permission denied" in message and "--identity KEY" in message
    assert pids(probe_dir) == {}


def test_an_unknown_host_key_names_the_fix(ssh_lab: SshLab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.touch()
    done = invoke("pod", "--hosts", ssh_lab.hosts([ssh_lab.ports[0]]), "--identity", str(ssh_lab.key),
                  "--ssh-option", f"UserKnownHostsFile={known}", "--image", "none", "--", "--x")  # fmt: skip
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "Host key verification failed" in message and "StrictHostKeyChecking=accept-new" in message
