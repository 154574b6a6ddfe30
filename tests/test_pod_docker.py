"""`invoke pod --hosts` with real images: pull from a real registry, `docker run`, stop (run: `pytest -m docker tests/test_pod_docker.py`).

Needs a running Docker daemon, Debian's `docker-registry` and sshd. The image is tiny and
made offline (bash and its libraries, `docker import`), with a probe as its entrypoint in
place of the engine, and pushed to a registry on 127.0.0.1 that the test starts.
"""
from __future__ import annotations

import shutil
import subprocess
import tarfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from pod_probe import invoke
from sshd_server import SshLab, free_port, lab

pytestmark = [pytest.mark.docker, pytest.mark.ssh]

IMAGE_PROBE = r"""#!/bin/bash
i=$TPU_TRAINER_PROCESS_INDEX
echo "probe args=[$*] index=$i count=$TPU_TRAINER_PROCESS_COUNT pjrt=$PJRT_DEVICE image=$TPU_TRAINER_IMAGE"
case " $* " in *" --fail-worker $i "*) sleep 2; echo "worker $i: simulated crash" >&2; exit 3;; esac
case " $* " in *" --hang "*) exec sleep 300;; esac
exit 0
"""


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=300)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        pytest.skip("needs a running Docker daemon (ci/start-dockerd.sh)")
    if shutil.which("docker-registry") is None:
        pytest.skip("needs Debian's docker-registry")
    dir, port = tmp_path_factory.mktemp("registry"), free_port()
    config = dir / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {dir}/data\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")  # fmt: skip
    process = subprocess.Popen(["docker-registry", "serve", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 15
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None, "registry did not start"
            time.sleep(0.1)
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def pushed(registry: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bool]:
    """A probe image built offline, pushed, and removed locally so the workers must pull it;
    and whether privileged containers can run here."""
    dir = tmp_path_factory.mktemp("image")
    (dir / "probe").write_text(IMAGE_PROBE)
    paths = {"/bin/bash", "/bin/sleep"}
    for binary in ("/bin/bash", "/bin/sleep"):
        for word in subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout.split():
            if word.startswith("/"):
                paths.add(word)
    with tarfile.open(dir / "rootfs.tar", "w", dereference=True) as tar:
        for path in sorted(paths):
            tar.add(path, arcname=path.lstrip("/"))
        tar.add(dir / "probe", arcname="probe")
    image = f"{registry}/tpu-trainer-probe:{uuid.uuid4().hex[:8]}"
    docker("import", "--change", 'ENTRYPOINT ["/bin/bash", "/probe"]', str(dir / "rootfs.tar"), image)
    docker("push", image)
    probe = docker("run", "--rm", "--privileged", image, "x", check=False)
    docker("rmi", image)
    return image, probe.returncode == 0


def privileged_flag(pushed: tuple[str, bool]) -> list[str]:
    """`--no-privileged` only where the daemon cannot start privileged containers at all.

    Some sandboxes (this project's CI machines among them) lack a capability that
    `--privileged` asks for, and runc refuses: "unable to apply caps". The flag is then
    dropped, and `test_pod_gcloud` still checks that `--privileged` is what users get.
    """
    return [] if pushed[1] else ["--no-privileged"]


@pytest.fixture(scope="module")
def ssh_lab(tmp_path_factory: pytest.TempPathFactory):
    yield from lab(tmp_path_factory.mktemp("sshd"), servers=2)


def test_workers_pull_and_run_the_image_with_their_environment(ssh_lab: SshLab, pushed) -> None:
    image = pushed[0]
    done = invoke("pod", "--hosts", ssh_lab.hosts(), *ssh_lab.options(), "--image", image,
                  *privileged_flag(pushed), "--", "--max-epochs", "1")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.index("[pod] pull") < done.stdout.index("[pod] train")
    for i in range(2):
        assert (
            f"[worker {i}] probe args=[train --max-epochs 1] index={i} count=2 pjrt=TPU image={image}\n"
        ) in done.stdout


def test_a_failing_worker_stops_the_other_container(ssh_lab: SshLab, pushed) -> None:
    job = f"t-{uuid.uuid4().hex[:8]}"
    done = invoke("pod", "--hosts", ssh_lab.hosts(), *ssh_lab.options(), "--image", pushed[0],
                  *privileged_flag(pushed), "--job", job, "--grace", "2", "--", "--hang", "--fail-worker", "1")  # fmt: skip
    assert done.returncode == 1
    assert "Training failed on worker 1" in done.stderr and "exit code 3" in done.stderr
    assert "The other 1 worker(s) were stopped." in done.stderr
    # `--rm` removal is asynchronous in the daemon: allow it a few seconds.
    deadline = time.monotonic() + 15
    while left := docker("ps", "-a", "--filter", f"name=tpu-trainer-pod-{job}", "--format", "{{.Names}} {{.Status}}").stdout.strip():
        assert time.monotonic() < deadline, f"containers left behind: {left}"
        time.sleep(0.2)


def test_an_image_missing_from_the_registry_is_a_clear_error(ssh_lab: SshLab, registry: str) -> None:
    image = f"{registry}/tpu-trainer-probe:never-pushed"
    done = invoke("pod", "--hosts", ssh_lab.hosts(), *ssh_lab.options(), "--image", image, "--", "--x")
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert f"could not pull image '{image}'" in message and "not found" in message.lower()
    assert "[pod] train" not in done.stdout
