"""How a command reaches worker N: plain `ssh` to a host we were given, or `gcloud`.

A transport only turns (worker, shell command) into an argv; running, streaming and
stopping belong to `tooling.pod.fanout`. gcloud is driven one worker at a time
(`--worker=N`) rather than `--worker=all`, because gcloud's own fan-out interleaves
output without worker names, waits for every worker even after one failed, and runs the
same command everywhere, so a worker could not be told its index.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Protocol

from tooling.errors import ToolingError
from tooling.pod.slice_size import SliceSize

#: Non-interactive: a password or host-key prompt would hang a fan-out forever.
SSH_BASE_OPTIONS = (
    "-o", "BatchMode=yes",
    "-o", "ConnectTimeout=10",
    "-o", "ServerAliveInterval=15",
    "-o", "ServerAliveCountMax=4",
)  # fmt: skip
_HOST = re.compile(r"(?:(?P<user>[^@\s:]+)@)?(?P<host>\[[0-9a-fA-F:.]+\]|[^@\s:\[\]]+)(?::(?P<port>\d+))?")
#: gcloud refuses to ssh into a TPU VM in these states (gcloud's ValidateTPUState).
UNUSABLE_STATES = frozenset({"STOPPED", "STOPPING", "DELETING", "HIDDEN", "PREEMPTED", "TERMINATED"})


class Transport(Protocol):
    """Reaches `count` workers, numbered 0..count-1."""

    @property
    def count(self) -> int: ...

    def argv(self, index: int, command: str) -> list[str]:
        """The local command that runs shell `command` on worker `index`."""
        ...

    def label(self, index: int) -> str:
        """How a user recognises worker `index` in an error message."""
        ...

    def hostnames(self) -> tuple[str, ...] | None:
        """Peers to tell the TPU runtime, or None when it finds them itself (Cloud TPU)."""
        ...

    def unreachable(self, code: int) -> bool:
        """Whether exit `code` means the connection failed (not the remote command)."""
        ...


@dataclass(frozen=True)
class Host:
    """One `[user@]host[:port]` the user listed."""

    text: str
    host: str
    user: str | None = None
    port: int | None = None

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host


def parse_hosts(text: str) -> tuple[Host, ...]:
    """Parse `--hosts h1,user@h2:2222,...`; order gives the worker index."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ToolingError(
            f"--hosts {text!r} lists no hosts. Give the workers in order, comma-separated, "
            "each as [user@]host[:port] (worker 0 first), e.g. --hosts tpu-w0,me@tpu-w1:2222."
        )
    hosts = []
    for item in items:
        match = _HOST.fullmatch(item)
        port = int(match["port"]) if match and match["port"] else None
        if match is None or (port is not None and not 0 < port < 65536):
            raise ToolingError(
                f"--hosts entry {item!r} is not [user@]host[:port] (port 1-65535); "
                "e.g. tpu-w0, me@10.0.0.3 or me@10.0.0.3:2222."
            )
        hosts.append(Host(item, match["host"].strip("[]"), match["user"], port))
    seen = [h.text for h in hosts]
    duplicates = sorted({t for t in seen if seen.count(t) > 1})
    if duplicates:
        raise ToolingError(
            f"--hosts lists {', '.join(duplicates)} more than once; each worker must be a "
            "different host (or port), or two workers would claim the same TPU."
        )
    return tuple(hosts)


@dataclass(frozen=True)
class SshTransport:
    """Plain OpenSSH with key auth, for TPU VMs (or any hosts) the user manages."""

    hosts: tuple[Host, ...]
    options: tuple[str, ...] = ()
    """Extra ssh arguments, e.g. ("-i", "~/.ssh/tpu", "-o", "ProxyJump=bastion")."""

    @property
    def count(self) -> int:
        return len(self.hosts)

    def argv(self, index: int, command: str) -> list[str]:
        host = self.hosts[index]
        port = ["-p", str(host.port)] if host.port else []
        return ["ssh", *SSH_BASE_OPTIONS, *self.options, *port, host.target, command]

    def label(self, index: int) -> str:
        return self.hosts[index].text

    def hostnames(self) -> tuple[str, ...] | None:
        return tuple(h.host for h in self.hosts)

    def unreachable(self, code: int) -> bool:
        return code == 255  # ssh's own failures; remote exit codes are passed through


@dataclass(frozen=True)
class GcloudTransport:
    """`gcloud compute tpus tpu-vm ssh NAME --worker=N`: Cloud TPU VMs, keys by gcloud."""

    tpu: str
    zone: str
    project: str | None
    count: int
    given_as: str | None = None
    """The user's words when `count` came from --workers/--accelerator-type; None when
    gcloud described the TPU."""

    def _where(self) -> list[str]:
        project = [f"--project={self.project}"] if self.project else []
        return [self.tpu, f"--zone={self.zone}", *project]

    def describe_argv(self) -> list[str]:
        """The gcloud command that tells how many workers the TPU has (JSON)."""
        return ["gcloud", "compute", "tpus", "tpu-vm", "describe", *self._where(), "--format=json"]

    def argv(self, index: int, command: str) -> list[str]:
        return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", *self._where(),
                f"--worker={index}", f"--command={command}"]  # fmt: skip

    def all_workers_argv(self, command: str) -> list[str]:
        """gcloud's documented all-workers form; used once to install keys and check reach."""
        return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", *self._where(),
                "--worker=all", f"--command={command}"]  # fmt: skip

    def label(self, index: int) -> str:
        return f"{self.tpu} worker {index}"

    def hostnames(self) -> tuple[str, ...] | None:
        return None

    def unreachable(self, code: int) -> bool:
        return code == 255


def require_gcloud(hint: str = "") -> str:
    path = shutil.which("gcloud")
    if path is None:
        raise ToolingError(
            "`gcloud` was not found on PATH. `--tpu NAME` reaches Cloud TPU VM workers "
            "through the Google Cloud CLI: install it (https://cloud.google.com/sdk/docs/install), "
            "run `gcloud auth login`, and retry; or reach your hosts over plain ssh with "
            f"--hosts h1,h2,...{hint}"
        )
    return path


def _require_name(tpu: str, zone: str) -> None:
    if not tpu or not zone:
        raise ToolingError(
            f"--tpu {tpu!r} --zone {zone!r}: a Cloud TPU is named by both, e.g. "
            "--tpu my-pod --zone us-central2-b (see `gcloud compute tpus tpu-vm list --zone Z`)."
        )


def describe_tpu(
    tpu: str, zone: str, project: str | None, size: SliceSize = SliceSize(), hint: str = ""
) -> GcloudTransport:
    """Ask gcloud how many workers TPU `tpu` has; refuse unknown or unusable TPUs, and a
    `size` the user gave that disagrees. `hint` ends gcloud's error messages."""
    _require_name(tpu, zone)
    argv = [require_gcloud(hint), *GcloudTransport(tpu, zone, project, 0).describe_argv()[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        # gcloud's first ERROR line says it all; the lines after it are the API's details.
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        said = next((line for line in lines if line.startswith("ERROR:")), " ".join(lines)).strip()
        if "NOT_FOUND" in done.stderr:
            raise ToolingError(
                f"TPU {tpu!r} was not found in zone {zone!r}"
                f"{f' of project {project!r}' if project else ''}: gcloud said: {said.rstrip('.')}. "
                f"Check the name and zone with `gcloud compute tpus tpu-vm list --zone={zone}`"
                f" (and --project if it is not your default).{hint}"
            )
        raise ToolingError(
            f"`{shlex.join(argv)}` failed (exit {done.returncode}): {said} "
            f"Fix gcloud's complaint (often `gcloud auth login` or --project) and retry.{hint}"
        )
    node = json.loads(done.stdout)
    state = node.get("state", "STATE_UNSPECIFIED")
    if state in UNUSABLE_STATES:
        fix = (
            "recreate it (a preempted or terminated TPU cannot be started again)"
            if state in ("PREEMPTED", "TERMINATED")
            else f"start it (`gcloud compute tpus tpu-vm start {tpu} --zone={zone}`) once it is stopped"
        )
        raise ToolingError(f"TPU {tpu!r} is {state}, so its workers cannot run a job: {fix}, then retry.")
    # Multi-network TPUs list one endpoint per network per worker; gcloud counts the first.
    nets = max(1, len(node.get("networkConfigs") or []))
    count = len(node.get("networkEndpoints") or []) // nets
    if count < 1:
        raise ToolingError(
            f"TPU {tpu!r} (state {state}) reports no worker endpoints yet; wait until "
            f"`gcloud compute tpus tpu-vm describe {tpu} --zone={zone}` shows READY."
        )
    size.check(tpu, count, node.get("acceleratorType", ""))
    return GcloudTransport(tpu, zone, project, count)


#: How `--dry-run` can do without gcloud; said wherever it had to ask gcloud.
OFFLINE_HINT = (
    " --workers N or --accelerator-type TYPE (e.g. v4-32) gives the worker count without "
    "gcloud, so --dry-run needs no credentials and no network."
)


def choose(
    tpu: str, zone: str, project: str, hosts: str, identity: str, ssh_options: list[str],
    size: SliceSize = SliceSize(), offline: bool = False,
) -> Transport:  # fmt: skip
    """The transport for `invoke pod`/`tpu-clean` options: exactly one of --tpu or --hosts.

    `offline` (a dry run) takes the worker count from `size` without calling gcloud when
    the user gave one; a real launch always asks gcloud and checks `size` against it.
    """
    if bool(tpu) == bool(hosts):
        raise ToolingError(
            f"Give exactly one of --tpu NAME (a Cloud TPU VM pod, via gcloud) or --hosts "
            f"h1,h2,... (hosts you manage, via ssh); got --tpu {tpu!r} --hosts {hosts!r}."
        )
    if tpu:
        if identity or ssh_options:
            raise ToolingError(
                "--identity and --ssh-option apply to --hosts only; with --tpu, gcloud "
                "manages the ssh keys (see `gcloud compute tpus tpu-vm ssh --help`)."
            )
        if offline and size.count is not None:
            _require_name(tpu, zone)
            return GcloudTransport(tpu, zone, project or None, size.count, given_as=size.said)
        return describe_tpu(tpu, zone, project or None, size, OFFLINE_HINT if offline else "")
    if size.count is not None:
        raise ToolingError(
            f"{size.said} sizes a Cloud TPU (--tpu); with --hosts the list itself gives the "
            f"worker count. Drop {size.said}, or list every worker in --hosts."
        )
    if zone or project:
        raise ToolingError("--zone and --project name a Cloud TPU; they go with --tpu, not --hosts.")
    options = [word for option in ssh_options for word in ("-o", option)]
    return SshTransport(parse_hosts(hosts), tuple((["-i", identity] if identity else []) + options))
