"""`invoke pod`: one training job on every worker of a TPU pod (gcloud) or host list (ssh).

A launch is a straight line of phases, each run on all workers at once and required to
succeed everywhere before the next starts: connect (reach every worker; with gcloud this
also installs its ssh key once), setup (the user's script), pull (the image), train. So a
missing image or a broken setup script fails before any worker holds the TPU.
"""
from __future__ import annotations

import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

from tooling.pod import commands as pc
from tooling.errors import ToolingError
from tooling.pod.fanout import Outcome, fan_out
from tooling.pod.transports import OFFLINE_HINT, GcloudTransport, Transport
from tooling.versions import default_image


@dataclass(frozen=True)
class Phase:
    """One step of the launch: one local command per worker (or one for all of them)."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    bodies: tuple[str, ...]
    """What runs on the worker, readable (the commands carry it quoted)."""
    prefixes: tuple[str, ...]
    stoppable: bool = True
    """Whether the worker's job runs under `supervised` and can be stopped remotely."""


def new_job_name() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def read_setup(path: str) -> str | None:
    """The text of `--setup SCRIPT` (None when not given)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ToolingError(
            f"--setup {path!r} cannot be read ({e.strerror}). Give the path of a bash script "
            "on this machine; its text is sent to and run on every worker before training."
        ) from e


def parse_env(items: list[str]) -> tuple[tuple[str, str], ...]:
    """`--env NAME=VALUE` items as pairs; names are checked by `PodSpec`."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ToolingError(f"--env {item!r} is not NAME=VALUE, e.g. --env XLA_USE_BF16=1.")
        pairs.append((name, value))
    return tuple(pairs)


def plan(spec: pc.PodSpec, transport: Transport) -> list[Phase]:
    """Every command of the launch, in order; `--dry-run` prints exactly these."""
    n = transport.count
    prefixes = tuple(f"[worker {i}] " for i in range(n))
    envs = [pc.worker_env(spec, i, n, transport.hostnames()) for i in range(n)]

    def phase(name: str, bodies: list[str]) -> Phase:
        commands = tuple(
            tuple(transport.argv(i, pc.supervised(body, pc.pidfile(spec, i))))
            for i, body in enumerate(bodies)
        )
        return Phase(name, commands, tuple(bodies), prefixes)

    if isinstance(transport, GcloudTransport):
        connect = Phase("connect", (tuple(transport.all_workers_argv("true")),), ("true",),
                        ("[pod] ",), stoppable=False)  # fmt: skip
    else:
        argvs = tuple(tuple(transport.argv(i, "true")) for i in range(n))
        connect = Phase("connect", argvs, ("true",) * n, prefixes, stoppable=False)
    phases = [connect]
    if spec.setup is not None:
        phases.append(phase("setup", [pc.setup_body(spec, env) for env in envs]))
    if spec.image is not None and spec.pull:
        phases.append(phase("pull", [pc.pull_body(spec)] * n))
    phases.append(phase("train", [pc.train_body(spec, env, i) for i, env in enumerate(envs)]))
    return phases


def stop_argv(spec: pc.PodSpec, transport: Transport, index: int) -> list[str]:
    """The local command that stops worker `index`'s job (its own connection)."""
    return transport.argv(index, pc.stop_script(spec, index))


def print_plan(phases: list[Phase], transport: Transport, out: IO[str]) -> None:
    """What `--dry-run` shows: each phase's commands, after where the worker count came from."""
    if isinstance(transport, GcloudTransport):
        if transport.given_as is None:
            how = f"asked `{shlex.join(transport.describe_argv())}`;{OFFLINE_HINT}"
        else:
            how = f"from {transport.given_as}; gcloud was not called"
        out.write(f"# TPU {transport.tpu}: {transport.count} worker(s) ({how})\n")
    for phase in phases:
        out.write(f"# phase {phase.name}\n")
        for command, body, prefix in zip(phase.commands, phase.bodies, phase.prefixes):
            out.write(f"{prefix}# runs: {body}\n{prefix}{shlex.join(command)}\n")


def launch(
    spec: pc.PodSpec, transport: Transport, dry_run: bool = False,
    out: IO[str] | None = None, err: IO[str] | None = None,
) -> None:  # fmt: skip
    """Run the job on every worker, or print its commands; raise ToolingError on failure.

    Warnings (e.g. a run directory on the workers' local disks) go to `err`.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    warning = pc.run_dir_warning(spec, transport.count)
    if warning is not None:
        err.write(f"[pod] {warning}\n")
        err.flush()
    phases = plan(spec, transport)
    if dry_run:
        print_plan(phases, transport, out)
        return

    def stop(index: int) -> None:
        argv = stop_argv(spec, transport, index)
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=spec.grace_seconds + 30)  # fmt: skip
        except subprocess.TimeoutExpired:
            pass  # the local kill that follows is all we can still do

    # SIGTERM (a CI timeout, `kill`) must stop the workers too, like Ctrl-C does: the local
    # ssh processes run in their own sessions and would not see a signal sent to us.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    phase = phases[0]
    try:
        for phase in phases:
            out.write(f"[pod] {phase.name}: job {spec.job} on {transport.count} worker(s)\n")
            out.flush()
            outcome = fan_out(
                [list(c) for c in phase.commands], phase.prefixes,
                stop=stop if phase.stoppable else None,
                grace_seconds=spec.grace_seconds, out=out,
            )  # fmt: skip
            if not outcome.ok:
                first = outcome.first_failure
                assert first is not None
                if phase.stoppable and transport.unreachable(outcome.codes[first] or 0):
                    stop(first)  # a dropped connection does not end the job it carried
                raise failure(phase, outcome, spec, transport)
    except KeyboardInterrupt:
        raise ToolingError(
            f"Interrupted during {phase.name}: job {spec.job} was stopped on all "
            f"{transport.count} worker(s). Run `invoke tpu-clean` with the same --tpu/--hosts "
            "if a worker still reports the TPU in use."
        ) from None
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    out.write(f"[pod] job {spec.job} finished on all {transport.count} worker(s)\n")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def failure(phase: Phase, outcome: Outcome, spec: pc.PodSpec, transport: Transport) -> ToolingError:
    """One paragraph for the worker that failed first, naming the fix for its phase."""
    i = outcome.first_failure
    assert i is not None
    code = outcome.codes[i]
    lines = [line.strip() for line in outcome.tails[i] if line.strip()]
    said = " / ".join(lines[-2:]) or "(no output)"
    who = "the pod" if len(phase.commands) == 1 < transport.count else f"worker {i} ({transport.label(i)})"
    stopped = sum(1 for c in outcome.codes if c is None)
    others = f" The other {stopped} worker(s) were stopped." if stopped and phase.stoppable else ""
    if phase.name == "connect" or (code is not None and transport.unreachable(code)):
        return ToolingError(
            f"{'Could not reach' if phase.name == 'connect' else 'Lost the connection to'} "
            f"{who} during {phase.name} (exit {code}): {said}.{others} {_reach_hint(transport, i, said, who)}"
        )
    if phase.name == "setup":
        return ToolingError(
            f"The setup script failed on {who} with exit code {code}: {said}.{others} "
            "Training was not started. The script runs with bash on every worker, with the "
            "job's environment; fix it (its full output is above) and retry."
        )
    if phase.name == "pull":
        return ToolingError(
            f"{who[0].upper()}{who[1:]} could not pull image {spec.image!r} (exit {code}): "
            f"{said}.{others} Every worker pulls the image before training so all run the "
            "same build: push it to a registry the workers can reach (`invoke push`), name "
            "it by its registry path in --image (e.g. us-docker.pkg.dev/PROJECT/REPO/"
            f"{default_image()}), and let the workers log in (`gcloud auth configure-docker`); "
            "for an image that already exists on every worker, pass --no-pull."
        )
    return ToolingError(
        f"Training failed on {who} with exit code {code}: {said}.{others} Its full log is "
        f"above, each line prefixed [worker {i}]."
    )


#: ssh's own words for the usual login failures, and what to do about each.
_SSH_FIXES = {
    "Host key verification failed": "the host's key is not in ~/.ssh/known_hosts yet: "
    "connect once by hand, or pass --ssh-option StrictHostKeyChecking=accept-new.",
    "Permission denied": "the host refused the key: give the right one with --identity KEY "
    "(or load it into ssh-agent) and check the user in user@host.",
    "Could not resolve hostname": "the name does not resolve here: check its spelling or use its IP.",
}


def _reach_hint(transport: Transport, index: int, said: str, who: str) -> str:
    if isinstance(transport, GcloudTransport):
        worker = "all" if who == "the pod" else str(index)
        return (
            f"Check that `gcloud compute tpus tpu-vm ssh {transport.tpu} --zone={transport.zone} "
            f"--worker={worker} --command=true` works from this machine without a prompt, then retry."
        )
    fix = next((fix for words, fix in _SSH_FIXES.items() if words in said), None)
    how = f"`{shlex.join(transport.argv(index, 'true'))}`"
    return (
        f"Every worker must accept a non-interactive key login; {fix or 'check that the host is up.'} "
        f"This must work without a prompt: {how}"
    )
