"""The invoke tasks' own options, in the engine's table format (`trainer.settings.Setting`).

`TABLE` is the one table behind every name: the engine's settings (the `train` and `env`
tasks take exactly the CLI's flags) and, here, the options only a task has. Names are
scoped per task: `make bench DEVICES=1,8` is bench's list of configurations, while `make
train DEVICES=8` is the engine's setting. Each option's invoke flag is `--` + its name,
unless `flags` says otherwise; `--` means the words after invoke's `--`. Standard library
only (`make help` reads it with the system Python).
"""
from __future__ import annotations

from trainer.settings import SETTINGS, Setting, for_command


def _task(*tasks: str):
    def option(name: str, help: str, **more) -> Setting:
        return Setting(name, None, help, commands=tasks, **more)

    return option


_train, _test, _reproduce = _task("train"), _task("test"), _task("reproduce")
_build, _base, _push, _run, _matrix = _task("build"), _task("base-image"), _task("push"), _task("run"), _task("matrix")
_images, _pod, _where, _clean = _task("build", "test-image"), _task("pod"), _task("pod", "tpu-clean"), _task("tpu-clean")
_bench, _storage, _data = _task("bench"), _task("bench-storage"), _task("bench-data")
_VERSION = "pair key from env/versions.yaml (default: its `default`)"

TASK_SETTINGS: tuple[Setting, ...] = (
    _train("args", "more CLI flags for `tpu-trainer train`, e.g. '--set module_args.lr=0.01'"),
    _task("train", "env")("from_make", "spell options in error messages as make variables (DEVICES=3), as "
                          "`make train` does", make=(), kind="switch"),
    _test("marker", "pytest -m expression (default: not docker)"),
    _test("k", "pytest -k expression"),
    _test("args", "more pytest arguments"),
    _reproduce("run_dir", "the run directory to reproduce (it holds run.json, or an older run's manifest.json, "
               "and steps.csv)", make=()),
    _reproduce("out", "where the new run directory goes (default: runs/)", make=()),
    _task("settings")("task", "only the options of this task, e.g. train, env, pod, bench"),
    _task("build", "push", "run")("version", _VERSION),
    _images("base_image", "base image NAME:TAG (default: python:<py>-slim-bookworm; offline: make base-image)"),
    _images("ca_bundle", "PEM bundle pip needs behind a TLS-intercepting proxy; kept out of the image"),
    _images("index_url", "Python package index (default PyPI; PyTorch's CPU index makes slim images)"),
    _build("no_cache", "rebuild every layer"),
    _base("tag", "NAME:TAG for the result (default tpu-trainer-base:3.11-bookworm)"),
    _base("mirror", "Debian mirror URL"),
    _base("force", "make it again even if TAG exists (invalidates build caches)"),
    _push("registry", "HOST:PORT of the registry (required)"),
    _push("username", "registry user; the password is read from $REGISTRY_PASSWORD (default: the credentials of "
          "`docker login`)", make=("REGISTRY_USER",)),
    _task("run", "matrix")("run_root", "host directory for the runs (run: mounted at /work/runs, default ./runs; "
                           "matrix: cells under RUN_ROOT/<UTC time>/, default runs/matrix)"),
    _run("tpu", "TPU VM flags (--privileged --net=host --shm-size, tpu-vm profile); default: auto-detect"),
    _run("cpu", "force CPU-XLA even on a TPU VM"),
    _matrix("versions", "comma-separated pair keys (default: every pair in env/versions.yaml)"),
    _matrix("max_epochs", "epochs per cell (default: the job's own)", make=("EPOCHS", "MAX_EPOCHS")),
    _where("tpu", "Cloud TPU VM (pod slice) name; its workers are reached with gcloud"),
    _where("zone", "zone of --tpu, e.g. us-central2-b"),
    _where("project", "GCP project of --tpu (default: gcloud's configured project)"),
    _where("hosts", "instead of --tpu: comma-separated [user@]host[:port], worker 0 first (plain ssh)"),
    _where("identity", "ssh private key for --hosts (ssh -i)"),
    _where("ssh_option", "extra `ssh -o` option for --hosts, e.g. ProxyJump=bastion (repeatable)"),
    _pod("image", "image every worker pulls and runs, by registry path (default: tpu-trainer:<the default pair "
         "of env/versions.yaml>); `none` runs --entrypoint on the host"),
    _pod("setup", "bash script run on every worker first (code, data); its text is sent over ssh",
         make=("SETUP_SCRIPT",)),
    _pod("dry_run", "print every worker's exact commands, run nothing (with --tpu, add --workers or "
         "--accelerator-type to need no gcloud, credentials or network)"),
    _pod("workers", "with --tpu: how many workers (VMs) the TPU has; checked against gcloud when launching"),
    _pod("accelerator_type", "with --tpu: its type, e.g. v4-32 or v5litepod-16; the worker count follows"),
    _pod("pull", "pull the image on every worker first (--no-pull: use each worker's local copy)"),
    _pod("privileged", "docker run --privileged, so the container sees the TPU (--no-privileged: for hosts that "
         "forbid it)"),
    _pod("job", "job name for containers/pidfiles on the workers (default: time + random)"),
    _pod("entrypoint", "the engine CLI on the hosts, used with --image none"),
    _pod("env", "NAME=VALUE from trainer/runtime/env_vars.py for every worker (repeatable)"),
    _pod("volume", "HOST:CONTAINER[:ro] mount for the container, e.g. for checkpoints (repeatable)"),
    _task("run", "pod")("shm_size", "the container's /dev/shm, docker's spelling (default 16g, as pytorch/xla asks)"),
    _where("grace", "seconds a stopped worker gets between SIGTERM and SIGKILL (default 10)"),
    _pod("args", "arguments of `tpu-trainer train` on every worker (invoke: after `--`)", flags=("--",),
         make=("ARGS",)),
    _clean("list_only", "list the processes holding the TPU, stop nothing"),
    _clean("sudo", "run as root on the workers (sudo -n), to see every user's processes"),
    _bench("workloads", "comma-separated workloads from tooling/bench/workloads.py: mlp, fsdp, lightning (default: all)"),
    _bench("devices", "device configurations, comma-separated (1: one device, 8: SPMD over 8; default 1,8)"),
    _task("bench", "bench-storage")("rounds", "interleaved rounds per configuration, >= 3 for a spread "
                                    "(default 3; bench-storage shows the median)"),
    _bench("epochs", "epochs per round (epoch 1 carries the compilations; default 3)"),
    _bench("wall_rounds", "whole-process runs per side for the start-to-exit wall clock (default 3)"),
    _bench("out", "run directory for bench.md and bench.json (default runs/bench-<time>)"),
    _storage("megabytes", "checkpoint size in MB (default 300)"),
    _data("seq_len", "tokens per sequence of the global batch read (default 64, bytelm's context)"),
    _data("global_batch_size", "sequences per global batch (default 64, bytelm's batch)"),
    _data("step_ms", "the step the loader must feed, in ms (default 400: bytelm's step on 8 CPU-emulated devices)"),
    _data("batches", "global batches read at the step's pace, local and gs:// each (default 100)"),
    _data("bpe_vocab", "vocabulary of the BPE whose throughput is measured (default 4096)"),
)

TABLE: tuple[Setting, ...] = SETTINGS + TASK_SETTINGS


def for_task(task: str) -> tuple[Setting, ...]:
    """Every option of the invoke task `task`: the engine's for `train`/`env`, then the task's own."""
    return for_command(task, TABLE)


def help_for(task: str) -> dict[str, str]:
    """invoke's `help=` for a task with a hand-written signature: {parameter: help}."""
    return {s.name: s.help for s in for_task(task) if s.flags != ("--",)}
