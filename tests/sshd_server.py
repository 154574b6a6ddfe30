"""Real OpenSSH servers on 127.0.0.1 high ports for the pod tests (not a test module).

Each server gets a host key, and the client a key pair, generated in a temp dir; nothing
outside that dir is touched except sshd's privilege-separation dir (/run/sshd), created
if missing when we are root. Tests using them skip with the reason when sshd cannot run
(install it with `bash ci/install-sshd.sh`).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = shutil.which("sshd", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def free_port() -> int:
    """A loopback port nobody listens on right now (also used as a closed port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SshLab:
    """N running sshd servers that accept `key` for the current user."""

    dir: Path
    key: Path
    ports: list[int]

    def hosts(self, ports: list[int] | None = None) -> str:
        user = os.environ.get("USER") or __import__("getpass").getuser()
        return ",".join(f"{user}@127.0.0.1:{p}" for p in (ports or self.ports))

    def options(self) -> list[str]:
        """`invoke pod` options that make ssh use our key and trust the fresh host keys."""
        return ["--identity", str(self.key), "--ssh-option", "StrictHostKeyChecking=no",
                "--ssh-option", "UserKnownHostsFile=/dev/null", "--ssh-option", "LogLevel=ERROR"]  # fmt: skip


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _start(dir: Path, index: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = dir / f"sshd_{index}.conf"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {dir / 'host_key'}",
                f"AuthorizedKeysFile {dir / 'authorized_keys'}",
                "PidFile none",
                "UsePAM no",
                "StrictModes no",  # the temp dir's permissions are not sshd's business here
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "MaxStartups 100",
                "MaxSessions 100",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    log = open(dir / f"sshd_{index}.log", "wb")
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    process.wait()
    pytest.skip(f"sshd could not start: {(dir / f'sshd_{index}.log').read_text()[-500:]}")


def lab(tmp: Path, servers: int) -> Iterator[SshLab]:
    """Start `servers` sshd; yield the lab; stop them (a generator for fixtures)."""
    if SSHD is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server/openssh-client not installed (run `bash ci/install-sshd.sh`)")
    if not os.path.isdir("/run/sshd"):
        if os.geteuid() != 0:
            pytest.skip("sshd needs /run/sshd, which only root can create")
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    _keygen(tmp / "host_key")
    _keygen(tmp / "client_key")
    (tmp / "authorized_keys").write_text((tmp / "client_key.pub").read_text())
    started: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        for i in range(servers):
            started.append(_start(tmp, i))
        yield SshLab(tmp, tmp / "client_key", [port for _, port in started])
    finally:
        for process, _ in started:
            process.terminate()
            process.wait(timeout=10)
