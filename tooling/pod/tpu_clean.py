"""Find and stop leftover processes that hold the TPU ("TPU in use" after a crashed run).

A process holds the TPU if it has a TPU device open (/dev/accel*, /dev/vfio/<N>) or has
libtpu.so mapped. Only processes identified that way are signalled, and each one's start
time is checked again just before the signal so a recycled pid is never hit.

Standard library only, plus trainer/runtime/tpu_host.py (which device files are a TPU's): `invoke
tpu-clean --tpu NAME` sends both files' source to every worker as one program
(`shipped_program`) and runs it there with `python3 -c`, where tpu-trainer is not installed.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import pwd
import signal
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from trainer.runtime.tpu_host import device_globs as tpu_device_globs

DEVICE_GLOBS = tpu_device_globs()  # /dev/vfio/<N>, never the bare /dev/vfio/vfio control node
LIBRARY_NAMES = ("libtpu.so",)


@dataclass(frozen=True)
class Holder:
    """A process that holds the TPU, and why we think so."""

    pid: int
    start_time: str
    user: str
    command: str
    reasons: tuple[str, ...]


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _start_time(pid: int, proc: str) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks); None if gone or a zombie."""
    try:
        stat = _read(f"{proc}/{pid}/stat")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]


def _user(pid: int, proc: str) -> str:
    try:
        for line in _read(f"{proc}/{pid}/status").splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                try:
                    return pwd.getpwuid(uid).pw_name
                except KeyError:
                    return str(uid)
    except OSError:
        pass
    return "?"


def _reasons(pid: int, device_globs: tuple[str, ...], libraries: tuple[str, ...], proc: str) -> list[str]:
    reasons: list[str] = []
    fd_dir = f"{proc}/{pid}/fd"
    for fd in os.listdir(fd_dir):  # PermissionError for other users' processes unless root
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if any(fnmatch.fnmatchcase(target, g) for g in device_globs) and target not in reasons:
            reasons.append(target)
    for line in _read(f"{proc}/{pid}/maps").splitlines():
        parts = line.split(maxsplit=5)
        path = parts[5].removesuffix(" (deleted)") if len(parts) == 6 else ""
        if os.path.basename(path) in libraries and path not in reasons:
            reasons.append(path)
    return reasons


def find_holders(
    device_globs: tuple[str, ...] = DEVICE_GLOBS,
    libraries: tuple[str, ...] = LIBRARY_NAMES,
    proc: str = "/proc",
) -> tuple[list[Holder], int]:
    """Processes holding the TPU, and how many processes we were not allowed to inspect."""
    holders, hidden = [], 0
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            reasons = _reasons(pid, device_globs, libraries, proc)
            start = _start_time(pid, proc)
            raw = _read(f"{proc}/{pid}/cmdline").replace("\0", " ").strip()
        except PermissionError:
            hidden += 1
            continue
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we looked
        if reasons and start is not None:
            holders.append(Holder(pid, start, _user(pid, proc), raw[:160] or "?", tuple(reasons)))
    return holders, hidden


def stop(holders: list[Holder], grace_seconds: float, proc: str = "/proc") -> list[Holder]:
    """SIGTERM every holder, SIGKILL those still alive after the grace; return survivors."""
    alive = list(holders)
    for sig, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        for h in alive:
            if _start_time(h.pid, proc) == h.start_time:  # same process, not a recycled pid
                try:
                    os.kill(h.pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            alive = [h for h in alive if _start_time(h.pid, proc) == h.start_time]
            if alive:
                time.sleep(0.05)
        alive = [h for h in alive if _start_time(h.pid, proc) == h.start_time]
        if not alive:
            break
    return alive


def clean(
    grace_seconds: float = 10.0,
    list_only: bool = False,
    device_globs: tuple[str, ...] = DEVICE_GLOBS,
    libraries: tuple[str, ...] = LIBRARY_NAMES,
    out: TextIO | None = None,
) -> int:
    """List the holders, stop them unless `list_only`; 0 if the TPU is free afterwards."""
    out = out if out is not None else sys.stdout
    holders, hidden = find_holders(device_globs, libraries)
    if hidden and os.geteuid() != 0:
        out.write(f"note: {hidden} processes of other users could not be inspected; "
                  "run as root (--sudo) to see them all\n")  # fmt: skip
    if not holders:
        out.write("no process holds the TPU\n")
        return 0
    for h in holders:
        out.write(f"{'holds' if list_only else 'stopping'} pid {h.pid} ({h.user}): "
                  f"{h.command} [{', '.join(h.reasons)}]\n")  # fmt: skip
    if list_only:
        return 0
    survivors = stop(holders, grace_seconds)
    for h in survivors:
        out.write(f"could not stop pid {h.pid} ({h.user}): {h.command}\n")
    out.write(f"stopped {len(holders) - len(survivors)} of {len(holders)} process(es)\n")
    return 1 if survivors else 0


#: What a worker must load, in this order: tpu_clean imports trainer.runtime.tpu_host.
SHIPPED_MODULES = ("trainer.runtime.tpu_host", "tooling.pod.tpu_clean")

_BOOTSTRAP = """import sys, types
def _load(name, source):
    module = types.ModuleType(name)
    module.__file__ = "<shipped " + name + ">"
    sys.modules[name] = module  # before exec: imports and dataclasses look modules up there
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module
for _name, _source in SOURCES[:-1]:
    _load(_name, _source)
sys.exit(_load(*SOURCES[-1]).main())
"""


def shipped_program(modules: tuple[str, ...] = SHIPPED_MODULES) -> str:
    """One `python3 -c` program that defines `modules` in order and runs the last one's main().

    Each module keeps its own name and namespace on the worker, so `from trainer.runtime.tpu_host
    import ...` above works there exactly as it does here, with no package installed.
    """
    import importlib.util

    sources = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        with open(spec.origin, encoding="utf-8") as f:
            sources.append((name, f.read()))
    return f"SOURCES = {sources!r}\n{_BOOTSTRAP}"


def remote_command(grace_seconds: float, list_only: bool, sudo: bool) -> str:
    """The shell command that runs the cleaner on a worker (python3 is on every TPU VM)."""
    import shlex

    words = ["python3", "-c", shipped_program(), "--grace", str(grace_seconds)]
    words = (["sudo", "-n"] if sudo else []) + words + (["--list-only"] if list_only else [])
    return shlex.join(words)


def clean_remote(
    tpu: str, zone: str, project: str, hosts: str, identity: str, ssh_options: list[str],
    grace_seconds: float, list_only: bool, sudo: bool,
) -> None:  # fmt: skip
    """Clean every worker of a pod or host list; raise ToolingError if any worker failed.

    The only part of this file that needs tpu-trainer (imported here, so the remote copy
    stays standard-library only).
    """
    from tooling.errors import ToolingError
    from tooling.pod.fanout import fan_out
    from tooling.pod.transports import choose

    transport = choose(tpu, zone, project, hosts, identity, ssh_options)
    command = remote_command(grace_seconds, list_only, sudo)
    outcome = fan_out(
        [transport.argv(i, command) for i in range(transport.count)],
        [f"[worker {i}] " for i in range(transport.count)],
        stop_on_failure=False,
    )
    failed = [i for i, code in enumerate(outcome.codes) if code not in (0, None)]
    if failed:
        who = ", ".join(f"worker {i} ({transport.label(i)}, exit {outcome.codes[i]})" for i in failed)
        raise ToolingError(
            f"tpu-clean did not finish on {who}; see the lines prefixed with those workers "
            "above. Exit 255 means the worker could not be reached; a process that survives "
            "SIGKILL is stuck in the kernel and needs a reboot of that worker; with --sudo, "
            "the login user needs passwordless sudo."
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tpu-clean", description=__doc__.split("\n")[0])
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--list-only", action="store_true", help="list holders, stop nothing")
    parser.add_argument("--device-glob", action="append", help="device path pattern (repeatable)")
    parser.add_argument("--library", action="append", help="library file name (repeatable)")
    args = parser.parse_args(argv)
    return clean(
        args.grace, args.list_only,
        tuple(args.device_glob or DEVICE_GLOBS), tuple(args.library or LIBRARY_NAMES),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
