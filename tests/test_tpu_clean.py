"""`tpu-clean` against real processes holding fake TPU devices (run: `pytest tests/test_tpu_clean.py`).

The devices are plain files under a temp dir (matched through the injectable globs) and
the library is a real file named libtpu.so that a process maps into memory; a bystander
process holding an ordinary file must survive every run.
"""
from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pod_probe import ROOT, alive, invoke
from tooling.pod import tpu_clean
from trainer.runtime import tpu_host

HOLD_FILE = """
import sys, time, signal
if "--ignore-term" in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)
f = open(sys.argv[1], "rb")
print("ready", flush=True)
time.sleep(300)
"""
MAP_FILE = """
import mmap, sys, time
with open(sys.argv[1], "rb") as f:  # the fd is closed after this block; only the mapping stays
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("ready", flush=True)
time.sleep(300)
"""


@pytest.fixture
def fake_tpu(tmp_path: Path):
    """Fake /dev/accel0, /dev/vfio/0 and libtpu.so, and processes holding them (plus a bystander)."""
    dev = tmp_path / "dev"
    (dev / "vfio").mkdir(parents=True)
    for name in ("accel0", "vfio/0", "not-a-tpu"):
        (dev / name).write_bytes(b"\0")
    lib = tmp_path / "site-packages" / "libtpu"
    lib.mkdir(parents=True)
    (lib / "libtpu.so").write_bytes(b"\0" * 8192)
    started: dict[str, subprocess.Popen[str]] = {}

    def start(name: str, code: str, *args: str) -> None:
        p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        started[name] = p

    start("accel", HOLD_FILE, str(dev / "accel0"))
    start("vfio", HOLD_FILE, str(dev / "vfio" / "0"), "--ignore-term")
    start("libtpu", MAP_FILE, str(lib / "libtpu.so"))
    start("bystander", HOLD_FILE, str(dev / "not-a-tpu"))
    globs = (str(dev / "accel*"), str(dev / "vfio" / "*"))
    yield globs, started, tmp_path
    for p in started.values():
        p.kill()
        p.wait()


def test_finds_exactly_the_holders_and_why(fake_tpu) -> None:
    globs, started, tmp = fake_tpu
    holders, _ = tpu_clean.find_holders(globs)
    ours = {h.pid: h.reasons for h in holders if h.pid in {p.pid for p in started.values()}}
    assert ours == {
        started["accel"].pid: (str(tmp / "dev" / "accel0"),),
        started["vfio"].pid: (str(tmp / "dev" / "vfio" / "0"),),
        started["libtpu"].pid: (str(tmp / "site-packages" / "libtpu" / "libtpu.so"),),
    }


def test_cli_lists_then_stops_holders_and_never_the_bystander(fake_tpu) -> None:
    globs, started, _ = fake_tpu
    args = [sys.executable, "-m", "tooling.pod.tpu_clean", "--grace", "1"]
    for g in globs:
        args += ["--device-glob", g]
    listed = subprocess.run([*args, "--list-only"], capture_output=True, text=True, cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    for name in ("accel", "vfio", "libtpu"):
        assert f"holds pid {started[name].pid} " in listed.stdout
    assert str(started["bystander"].pid) not in listed.stdout
    assert all(p.poll() is None for p in started.values()), "--list-only must stop nothing"

    start = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped 3 of 3 process(es)" in done.stdout
    for name in ("accel", "vfio", "libtpu"):
        assert started[name].wait(timeout=10) is not None
    assert started["accel"].returncode == -15 and started["libtpu"].returncode == -15
    assert started["vfio"].returncode == -9, "a holder ignoring SIGTERM gets SIGKILL after the grace"
    assert alive(started["bystander"].pid) and started["bystander"].poll() is None
    assert time.monotonic() - start < 10


def test_nothing_to_clean(tmp_path: Path) -> None:
    out = io.StringIO()
    assert tpu_clean.clean(device_globs=(str(tmp_path / "accel*"),), libraries=("no-such-lib.so",), out=out) == 0
    assert out.getvalue().endswith("no process holds the TPU\n")


def test_a_recycled_pid_is_not_signalled(fake_tpu) -> None:
    globs, started, _ = fake_tpu
    holders, _ = tpu_clean.find_holders(globs)
    target = next(h for h in holders if h.pid == started["accel"].pid)
    stale = tpu_clean.Holder(target.pid, "1", target.user, target.command, target.reasons)
    assert tpu_clean.stop([stale], grace_seconds=0.2) == []
    assert started["accel"].poll() is None, "a process whose start time differs must not be touched"


def test_invoke_tpu_clean_on_this_machine() -> None:
    done = invoke("tpu-clean", "--list-only")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("no process holds the TPU\n") or "holds pid" in done.stdout


def test_the_vfio_control_node_alone_is_not_a_tpu(tmp_path: Path) -> None:
    # /dev/vfio/vfio exists wherever the vfio driver is loaded (a VM host passing a GPU
    # through, too); only the numbered groups /dev/vfio/<N> are TPU chips.
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    for name in ("vfio", "0"):
        (tmp_path / "dev" / "vfio" / name).write_bytes(b"\0")
    control, chip = (
        subprocess.Popen([sys.executable, "-c", HOLD_FILE, str(tmp_path / "dev" / "vfio" / name)],
                         stdout=subprocess.PIPE, text=True)
        for name in ("vfio", "0")
    )  # fmt: skip
    try:
        for p in (control, chip):
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        holders, _ = tpu_clean.find_holders(tpu_host.device_globs(str(tmp_path)), libraries=())
        assert {h.pid for h in holders} & {control.pid, chip.pid} == {chip.pid}
    finally:
        for p in (control, chip):
            p.kill()
            p.wait()


def run_as_a_worker(program: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python3 -c PROGRAM ARGS` as on a TPU VM: the system python3, no PYTHONPATH, no
    tpu-trainer installed, and a working directory without the project in it."""
    return subprocess.run(["python3", "-c", program, *args], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, cwd=cwd, timeout=60)  # fmt: skip


def test_the_shipped_program_runs_on_a_bare_python_and_finds_the_holders(fake_tpu) -> None:
    globs, started, tmp = fake_tpu
    args = ["--list-only"] + [w for g in globs for w in ("--device-glob", g)]
    done = run_as_a_worker(tpu_clean.shipped_program(), *args, cwd=tmp)
    assert done.returncode == 0, done.stderr
    for name in ("accel", "vfio", "libtpu"):
        assert f"holds pid {started[name].pid} " in done.stdout
    # Negative control: tpu_clean.py alone (the old shipment) cannot import tpu_host there.
    alone = run_as_a_worker(tpu_clean.shipped_program(("tooling.pod.tpu_clean",)), "--list-only", cwd=tmp)
    assert alone.returncode == 1 and "No module named 'trainer'" in alone.stderr


def test_the_remote_command_runs_in_a_workers_shell(tmp_path: Path) -> None:
    # Exactly the command line `invoke tpu-clean --tpu/--hosts` sends, run by bash.
    command = tpu_clean.remote_command(grace_seconds=1, list_only=True, sudo=False)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("no process holds the TPU\n") or "holds pid" in done.stdout
