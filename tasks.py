"""Developer and user tasks for tpu-trainer (`invoke --list`; `make help` shows the same).

Each task is thin: it parses its arguments, calls the engine's CLI or a `tooling/`
module, and turns a `tooling.errors.ToolingError` into invoke's `Exit` (a clear paragraph,
no traceback, non-zero exit). The engine is only ever driven through its CLI.
"""
from __future__ import annotations

import contextlib
import shlex
import sys

from invoke import Exit, task

from tooling.errors import ToolingError


@contextlib.contextmanager
def _tooling_errors():
    """A ToolingError is the user's to fix: its paragraph, exit 1, no traceback."""
    try:
        yield
    except ToolingError as err:
        raise Exit(str(err), code=1) from None

# ----------------------------------------------------------------------------- engine
# (train, test, env) — owned by the engine issue.

TRAINER = [sys.executable, "-m", "trainer"]
PYTEST_NO_TESTS = 5


def _run(c, argv: list[str]) -> None:
    """Run a command, streaming its output; fail with its exit code (its message is already shown)."""
    result = c.run(shlex.join(argv), pty=sys.stdout.isatty(), warn=True)
    if result.exited:
        raise Exit(code=result.exited)


@task(
    help={
        "cores": "1, the host's device count (8 here), auto, or one device as a list: [5]",
        "precision": "fp32 (default), bf16 (autocast), bf16-true, or Lightning's 32/16-mixed/bf16-mixed",
        "epochs": "passes over the training data",
        "run_dir": "output directory (default runs/<time>-<job>); must be new or empty unless resuming",
        "config": "a job YAML (module, module_args, trainer: ...)",
        "profile": "environment profile from env/ (default: tpu-vm on a TPU host, cpu otherwise)",
        "args": "more CLI flags for `tpu-trainer train`, e.g. '--set module_args.lr=0.01'",
        "resume": "auto (newest valid checkpoint in --run-dir; fresh if none) or a checkpoint file",
        "debug": "save torch_xla's metrics report and compile/host-read causes into the run directory",
        "accumulate": "batches per optimizer step (gradient accumulation)",
        "max-steps": "stop after N optimizer steps, with a final checkpoint",
        "clip": "clip the gradients' global norm to this",
        "strategy": "data (default: whole model on every device) or fsdp (parameters, gradients, optimizer state sharded)",
        "mesh": "device mesh axis sizes, e.g. data:2,fsdp:4 (their product = the device count)",
        "from-make": "spell options in error messages as make variables (CORES=3), as `make train` does",
    }
)
def train(c, cores=None, precision=None, epochs=None, run_dir=None, config=None, profile=None, args="",
          resume=None, strategy=None, mesh=None, from_make=False, debug=False, accumulate=None, max_steps=None,
          clip=None):
    """Train a job on XLA with the engine's CLI (default: an MLP on the 8x8 digits).

    Exit codes: 0 done, 2 a config/user error, 143 stopped by SIGTERM and 130 by SIGINT
    (a checkpoint was written; rerun with --resume auto to continue exactly).
    """
    argv = TRAINER + ["train"]
    for flag, value in (("--cores", cores), ("--precision", precision), ("--max-epochs", epochs),
                        ("--run-dir", run_dir), ("--config", config), ("--env-profile", profile),
                        ("--resume", resume), ("--strategy", strategy), ("--mesh", mesh),
                        ("--accumulate-grad-batches", accumulate), ("--max-steps", max_steps),
                        ("--gradient-clip-val", clip)):
        if value is not None:
            argv += [flag, str(value)]
    if from_make:
        argv += ["--options-from", "make"]
    if debug:
        argv += ["--debug"]
    _run(c, argv + shlex.split(args))


@task(help={"marker": "pytest -m expression", "k": "pytest -k expression", "args": "more pytest arguments"})
def test(c, marker="not docker", k=None, args=""):
    """Run the test suite on CPU-emulated XLA (the image tests run with `invoke test-image`)."""
    _pytest(c, marker, (["-k", k] if k else []) + shlex.split(args))


def _pytest(c, marker: str, extra: list[str]) -> None:
    """pytest -m MARKER; "no tests selected" (exit 5) is a failure, never a pass."""
    argv = [sys.executable, "-m", "pytest", "-m", marker] + extra
    result = c.run(shlex.join(argv), pty=sys.stdout.isatty(), warn=True)
    if result.exited == PYTEST_NO_TESTS:
        raise Exit(f"pytest selected no tests (-m {marker!r}); a run that tests nothing is a failure.", code=1)
    if result.exited:
        raise Exit(code=result.exited)


@task(help={"profile": "cpu, tpu-vm, xrt-tpu-vm or xrt-tpu-node (files in env/)", "cores": "devices the run uses"})
def env(c, profile, cores=None):
    """Print a profile's environment as exports: eval "$(invoke env --profile cpu --cores 8)"."""
    argv = TRAINER + ["env", "--profile", profile] + (["--cores", str(cores)] if cores else [])
    result = c.run(shlex.join(argv), hide="out", warn=True)
    if result.exited:
        raise Exit(code=result.exited)
    print(result.stdout, end="")


@task(help={"run_dir": "the run directory to reproduce (it holds manifest.json and steps.csv)",
            "out": "where the new run directory goes (default: runs/)"})
def reproduce(c, run_dir, out="runs"):
    """Re-run RUN_DIR's exact job (in its image when it had one) and report whether the losses match.

    Exits 0 when every logged loss is bitwise identical, 1 otherwise.
    """
    from pathlib import Path

    from tooling.reproduce import reproduce as rerun

    with _tooling_errors():
        comparison = rerun(Path(run_dir), Path(out))
    print(comparison.describe())
    if not comparison.equal:
        raise Exit(code=1)

# ----------------------------------------------------------------------------- images
# (build, push, run, base-image, matrix) — owned by the images issue.
# Tooling imports stay inside the tasks: `invoke --list` must not need the Docker SDK.


def _image_options(base_image: str, ca_bundle: str, index_url: str, no_cache: bool = False):
    from pathlib import Path

    from tooling.docker.image import DEFAULT_INDEX_URL, BuildOptions

    return BuildOptions(base_image=base_image or None,
                        ca_bundle=Path(ca_bundle) if ca_bundle else None,
                        index_url=index_url or DEFAULT_INDEX_URL, no_cache=no_cache)


@task(name="build", help={
    "version": "pair key from env/versions.yaml (default: its `default`, e.g. 2.9)",
    "base-image": "base image NAME:TAG (default: python:<py>-slim-bookworm; offline: see base-image)",
    "ca-bundle": "PEM bundle pip needs behind a TLS-intercepting proxy; kept out of the image",
    "index-url": "Python package index (default PyPI; PyTorch's CPU index makes slim images)",
    "no-cache": "rebuild every layer",
})
def image_build(c, version="", base_image="", ca_bundle="", index_url="", no_cache=False):
    """Build tpu-trainer:<version> (and an immutable <version>-<git sha> tag) via the Docker SDK."""
    from tooling.docker.image import build_image
    from tooling.versions import get_pair

    with _tooling_errors():
        build_image(get_pair(version or None), _image_options(base_image, ca_bundle, index_url, no_cache))


@task(name="base-image", help={"tag": "NAME:TAG for the result", "mirror": "Debian mirror URL",
                               "force": "make it again even if TAG exists (invalidates build caches)"})
def image_base(c, tag="tpu-trainer-base:3.11-bookworm", mirror="http://deb.debian.org/debian", force=False):
    """Make an offline equivalent of python:3.11-slim-bookworm (debootstrap + import; needs root)."""
    from tooling.docker.base_image import make_base_image

    with _tooling_errors():
        make_base_image(tag, mirror=mirror, force=force)


@task(name="push", help={
    "registry": "HOST:PORT of the registry (required)",
    "version": "pair key whose two tags to push (default: env/versions.yaml's default)",
    "username": "registry user; the password is read from $REGISTRY_PASSWORD "
                "(default: the credentials of `docker login`)",
})
def image_push(c, registry, version="", username=""):
    """Push tpu-trainer:<version> and its immutable tag; verify each digest by pulling it back."""
    import os

    from tooling.docker.image import git_revision, image_tags
    from tooling.docker.registry import push_image
    from tooling.versions import get_pair

    auth = None
    if username:
        if "REGISTRY_PASSWORD" not in os.environ:
            raise Exit(f"--username {username} needs the password in $REGISTRY_PASSWORD "
                       "(kept out of the command line and shell history).", code=1)
        auth = {"username": username, "password": os.environ["REGISTRY_PASSWORD"]}
    with _tooling_errors():
        pair = get_pair(version or None)
        push_image(image_tags(pair, git_revision()), registry, auth)


@task(name="run", help={
    "version": "pair key: runs tpu-trainer:<version>",
    "run-root": "host directory mounted at /work/runs (default: ./runs)",
    "tpu": "TPU VM flags (--privileged --net=host --shm-size, tpu-vm profile); default: auto-detect",
    "cpu": "force CPU-XLA even on a TPU VM",
    "shm-size": "the container's /dev/shm on a TPU VM, docker's spelling (default 16g, as pytorch/xla asks)",
})
def image_run(c, version="", run_root="runs", tpu=False, cpu=False, shm_size="16g"):
    """Run `tpu-trainer ARGS` in the image: `invoke run -- train --cores 8 --precision bf16`.

    Runs as you (uid:gid), with ./runs mounted at /work/runs (use `--run-dir runs/NAME`),
    and exits with the container's exit code.
    """
    from pathlib import Path

    from tooling.docker.container import RunSpec, image_reference, run_container, tpu_host, with_profile
    from tooling.versions import get_pair

    args = shlex.split(c.remainder) or ["--help"]
    on_tpu = (tpu or tpu_host()) and not cpu
    with _tooling_errors():
        pair = get_pair(version or None)
        spec = RunSpec(image_reference(pair.key), with_profile(args, on_tpu), Path(run_root), tpu=on_tpu,
                       shm_size=shm_size)  # fmt: skip
        code = run_container(spec)
    if code != 0:
        raise Exit(code=code)


@task(name="matrix", help={
    "versions": "comma-separated pair keys (default: every pair in env/versions.yaml)",
    "max-epochs": "epochs per cell (default: the job's own)",
    "run-root": "host directory; each invocation writes its cells under RUN_ROOT/<UTC time>/",
})
def image_matrix(c, versions="", max_epochs=0, run_root="runs/matrix"):
    """Every pair x CORES {1,8} x PRECISION {fp32,bf16} in its image on CPU-XLA; a pass/fail table."""
    import time
    from pathlib import Path

    from tooling.docker.matrix import cells, run_cell, table
    from tooling.versions import get_pair, load_pairs

    with _tooling_errors():
        pairs = [get_pair(k) for k in versions.split(",")] if versions else list(load_pairs().values())
        root = Path(run_root) / time.strftime("%Y%m%d-%H%M%S", time.gmtime())  # the engine never overwrites a run
        results = []
        for cell in cells(pairs):
            print(f"=== {cell.name} -> {root / cell.name}", flush=True)
            results.append(run_cell(cell, root, max_epochs or None))
    print(table(results))
    failed = [r.cell.name for r in results if not r.passed]
    if failed:
        raise Exit(f"{len(failed)} of {len(results)} matrix cells failed: {', '.join(failed)}.", code=1)


@task(name="test-image", help={
    "base-image": "as for build", "ca-bundle": "as for build", "index-url": "as for build",
})
def image_test(c, base_image="", ca_bundle="", index_url=""):
    """Build the default pair's image, then run the Docker-marked tests against it."""
    from tooling.docker.image import build_image
    from tooling.versions import get_pair

    with _tooling_errors():
        build_image(get_pair(), _image_options(base_image, ca_bundle, index_url))
    _pytest(c, "docker", [])

# ----------------------------------------------------------------------------- pods
# (pod, tpu-clean) — owned by the pod issue.

_WHERE_HELP = {
    "tpu": "Cloud TPU VM (pod slice) name; its workers are reached with gcloud",
    "zone": "zone of --tpu, e.g. us-central2-b",
    "project": "GCP project of --tpu (default: gcloud's configured project)",
    "hosts": "instead of --tpu: comma-separated [user@]host[:port], worker 0 first (plain ssh)",
    "identity": "ssh private key for --hosts (ssh -i)",
    "ssh-option": "extra `ssh -o` option for --hosts, e.g. ProxyJump=bastion (repeatable)",
}


@task(
    help={
        **_WHERE_HELP,
        "image": "image every worker pulls and runs, by registry path (reg/repo/tpu-trainer:2.9);"
        " `none` runs --entrypoint on the host",
        "setup": "bash script run on every worker first (code, data); its text is sent over ssh",
        "dry-run": "print every worker's exact commands, run nothing (with --tpu, add --workers or"
        " --accelerator-type to need no gcloud, credentials or network)",
        "workers": "with --tpu: how many workers (VMs) the TPU has; checked against gcloud when launching",
        "accelerator-type": "with --tpu: its type, e.g. v4-32 or v5litepod-16; the worker count follows",
        "shm-size": "docker run --shm-size for the container's /dev/shm (default 16g, as pytorch/xla asks)",
        "pull": "pull the image on every worker first (--no-pull: use each worker's local copy)",
        "privileged": "docker run --privileged, so the container sees the TPU "
        "(--no-privileged: for hosts that forbid it)",
        "job": "job name for containers/pidfiles on the workers (default: time + random)",
        "entrypoint": "the engine CLI on the hosts, used with --image none",
        "env": "NAME=VALUE from trainer/runtime/env_vars.py for every worker (repeatable)",
        "volume": "HOST:CONTAINER[:ro] mount for the container, e.g. for checkpoints (repeatable)",
        "grace": "seconds a stopped worker gets between SIGTERM and SIGKILL",
    },
    iterable=["env", "volume", "ssh_option"],
    auto_shortflags=False,  # `-h` for --hosts or `-` for --ssh-option would only confuse
)
def pod(c, tpu="", zone="", project="", hosts="", image="tpu-trainer:2.9", setup="",
        dry_run=False, pull=True, privileged=True, job="", entrypoint="tpu-trainer",
        env=None, volume=None, identity="", ssh_option=None, grace=10,
        workers="", accelerator_type="", shm_size="16g"):  # fmt: skip
    """Run `tpu-trainer train ARGS` on every worker: `invoke pod --tpu NAME --zone Z -- ARGS`.

    Each worker gets PJRT_DEVICE=TPU, its TPU_TRAINER_PROCESS_INDEX and the process count;
    logs stream back prefixed `[worker N]`; if one worker fails the others are stopped and
    the command exits non-zero.
    """
    from tooling.pod import launch as launcher
    from tooling.pod import transports
    from tooling.pod.commands import PodSpec
    from tooling.pod.slice_size import parse_slice_size

    with _tooling_errors():
        spec = PodSpec(
            job=job or launcher.new_job_name(), args=tuple(shlex.split(c.remainder)),
            image=None if image == "none" else image, entrypoint=entrypoint, pull=pull,
            privileged=privileged, setup=launcher.read_setup(setup), env=launcher.parse_env(env or []),
            volumes=tuple(volume or []), grace_seconds=int(grace), shm_size=shm_size,
        )  # fmt: skip
        transport = transports.choose(tpu, zone, project, hosts, identity, ssh_option or [],
                                      parse_slice_size(workers, accelerator_type), offline=dry_run)  # fmt: skip
        launcher.launch(spec, transport, dry_run=dry_run)


@task(
    help={
        **_WHERE_HELP,
        "grace": "seconds between SIGTERM and SIGKILL",
        "list-only": "list the processes holding the TPU, stop nothing",
        "sudo": "run as root on the workers (sudo -n), to see every user's processes",
    },
    iterable=["ssh_option"],
    auto_shortflags=False,
)
def tpu_clean(c, tpu="", zone="", project="", hosts="", grace=10, list_only=False, sudo=False,
              identity="", ssh_option=None):  # fmt: skip
    """Stop leftover processes holding the TPU (/dev/accel*, /dev/vfio/<N>, libtpu.so).

    Without --tpu/--hosts it cleans this machine; with them, every worker. It lists what it
    stops and never signals a process it did not see holding the TPU.
    """
    from tooling.pod import tpu_clean as cleaner

    with _tooling_errors():
        if not tpu and not hosts:
            code = cleaner.clean(grace_seconds=float(grace), list_only=list_only)
            if code:
                raise Exit("Some processes holding the TPU survived SIGKILL (listed above).", code=1)
            return
        cleaner.clean_remote(tpu, zone, project, hosts, identity, ssh_option or [],
                             float(grace), list_only, sudo)  # fmt: skip


# ----------------------------------------------------------------------------- bench
@task(help={"workloads": "comma-separated workloads from tooling/bench/workloads.py: mlp, fsdp (default: both)",
            "devices": "device configurations, comma-separated (1: one device, 8: SPMD over 8)",
            "rounds": "interleaved rounds per configuration (>= 3 for a spread)",
            "epochs": "epochs per round (epoch 1 carries the compilations)",
            "wall_rounds": "whole-process runs per side for the start-to-exit wall clock",
            "out": "run directory for bench.md and bench.json (default runs/bench-<time>)"})
def bench(c, workloads="mlp,fsdp", devices="1,8", rounds=3, epochs=3, wall_rounds=3, out=""):
    """Benchmark the engine against a hand-written torch_xla loop (figures, not pass/fail)."""
    from datetime import datetime
    from pathlib import Path

    from tooling.bench.report import run_bench

    out_dir = Path(out or f"runs/bench-{datetime.now():%Y%m%d-%H%M%S}")
    run_bench(out_dir, workloads.split(","), [int(d) for d in devices.split(",")], int(rounds), int(epochs),
              int(wall_rounds))
    print((out_dir / "bench.md").read_text())
    print(f"written: {out_dir}/bench.md, {out_dir}/bench.json")


@task(name="bench-storage", help={"megabytes": "checkpoint size in MB", "rounds": "rounds (the median is shown)"})
def bench_storage(c, megabytes=300, rounds=3):
    """What a gs:// run directory costs per checkpoint, against a local Cloud Storage server (figures)."""
    from tooling.bench.storage import run_storage_bench

    print(run_storage_bench(int(megabytes), int(rounds)))
