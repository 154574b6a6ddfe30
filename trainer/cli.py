"""`tpu-trainer`: the command line of the engine (also `python -m trainer`).

    tpu-trainer train [--cores 8] [--precision bf16] [--config job.yaml] [--set key=value ...]
    tpu-trainer env --profile cpu [--cores 8]     # exports a shell can eval
    tpu-trainer preflight [--import]              # version pair (and torch_xla import) check

The entry point only parses, builds, runs and closes. A `UserError` is printed as one
paragraph without a traceback and exits with code 2.
"""
from __future__ import annotations

import argparse
import os
import importlib
import inspect
import logging
import sys
from typing import Any, Sequence

from trainer.errors import USER_ERROR_EXIT_CODE, UserError

# CLI flags that are shorthands for dotted config keys.
FLAG_KEYS = {
    "module": "module",
    "cores": "trainer.devices",
    "precision": "trainer.precision",
    "max_epochs": "trainer.max_epochs",
    "seed": "trainer.seed",
    "run_dir": "trainer.run_dir",
    "env_profile": "trainer.env_profile",
    "log_every_n_steps": "trainer.log_every_n_steps",
    "last_batch": "trainer.last_batch",
    "resume": "trainer.resume",
    "strategy": "parallel.strategy",
    "mesh": "parallel.mesh",
    "max_steps": "trainer.max_steps",
    "accumulate_grad_batches": "trainer.accumulate_grad_batches",
    "gradient_clip_val": "trainer.gradient_clip_val",
    "val_check_interval": "trainer.val_check_interval",
}
# ---- diagnostics (issue 10) flags; their own block for easy merges.
DIAGNOSTIC_FLAG_KEYS = {
    "profile_steps": "diagnostics.profile_steps",
    "compile_cache": "diagnostics.compile_cache",
}
DIAGNOSTIC_SWITCHES = {"debug": "diagnostics.debug", "strict_compile": "diagnostics.strict_compile"}


def add_diagnostic_flags(train: argparse.ArgumentParser) -> None:
    group = train.add_argument_group("diagnostics (what XLA is doing)")
    group.add_argument("--debug", action="store_true",
                       help="save torch_xla's metrics report and compile/host-read causes into the run "
                            "directory and print a summary (slower; for diagnosis)")
    group.add_argument("--strict-compile", action="store_true",
                       help="fail the run (exit 2) when XLA compiles again after the warm-up steps")
    group.add_argument("--profile-steps", metavar="FIRST:LAST",
                       help="capture an XLA profiler trace of these global steps into RUN_DIR/profile "
                            "(view: tensorboard --logdir RUN_DIR/profile, Profile tab), e.g. 10:20")
    group.add_argument("--compile-cache", metavar="DIR",
                       help="persistent compilation cache directory (off on PJRT CPU, which cannot reload executables)")


def diagnostic_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides = {key: getattr(args, flag) for flag, key in DIAGNOSTIC_FLAG_KEYS.items()
                 if getattr(args, flag, None) is not None}
    overrides.update({key: True for flag, key in DIAGNOSTIC_SWITCHES.items() if getattr(args, flag, False)})
    return overrides
# ---- end diagnostics


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpu-trainer", description="Train PyTorch modules on XLA devices (TPU, or CPU-emulated).")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a job (default: MLP on the 8x8 digits)")
    train.add_argument("--config", help="job YAML (module, module_args, trainer: {...})")
    train.add_argument("--module", help='the TrainModule class, "package.module:Class"')
    train.add_argument("--cores", "--devices", dest="cores",
                       help="1, all of the host's devices (8 on a v3-8 or the cpu profile), auto, or one device as a list: [5]")
    train.add_argument("--precision", help="fp32 (default), bf16 (autocast), bf16-true (bf16 weights), or Lightning's 32/16-mixed/bf16-mixed...")
    train.add_argument("--max-epochs", "--epochs", dest="max_epochs", type=int, help="passes over the training data")
    train.add_argument("--seed", type=int, help="one seed for Python, NumPy, torch, XLA and the shuffle order")
    train.add_argument("--run-dir", help="output directory (default runs/<time>-<job>); must be new or empty, unless resuming")
    train.add_argument("--env-profile", help="runtime profile from env/: cpu, tpu-vm, ... (default auto)")
    train.add_argument("--log-every-n-steps", type=int, help="read the loss to the host every N steps (asynchronously)")
    train.add_argument("--last-batch", choices=("pad", "drop"), help="pad+mask (default) or drop a ragged last batch")
    train.add_argument("--resume", metavar="auto|PATH",
                       help="auto: continue from the newest valid checkpoint in --run-dir (fresh if none); "
                            "PATH: from that checkpoint file. Exit codes after SIGTERM/SIGINT: 143/130")
    train.add_argument("--max-steps", type=int, help="stop after N optimizer steps (mid-epoch if need be), "
                                                     "with a final checkpoint")
    train.add_argument("--accumulate-grad-batches", "--accumulate", dest="accumulate_grad_batches", type=int,
                       help="batches per optimizer step (gradient accumulation)")
    train.add_argument("--gradient-clip-val", "--clip", dest="gradient_clip_val", type=float,
                       help="clip the gradients' global norm to this (0: off); logs grad_norm")
    train.add_argument("--val-check-interval", help="also validate every N optimizer steps (integer) or "
                                                    "fraction of an epoch (0.25)")
    train.add_argument("--strategy", help="data (default: every device holds the whole model) or fsdp (parameters, "
                                          "gradients and optimizer state sharded over the mesh)")
    train.add_argument("--mesh", help="device mesh axis sizes, e.g. data:2,fsdp:4 (product = devices); default: one "
                                      "axis over every device")
    train.add_argument("--options-from", choices=("cli", "make"), default="cli",
                       help="how errors spell options: as these flags (default) or as make variables (CORES=...)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override any config key, e.g. --set module_args.lr=0.01 (repeatable)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    add_diagnostic_flags(train)
    train.set_defaults(func=run_train)

    env = commands.add_parser("env", help="print the exports of an environment profile")
    env.add_argument("--profile", required=True, help="a profile in env/, e.g. cpu or tpu-vm")
    env.add_argument("--cores", type=int, help="devices the run will use (fills ${devices})")
    env.set_defaults(func=run_env)

    preflight = commands.add_parser("preflight", help="check the torch/torch_xla pair")
    preflight.add_argument("--import", dest="do_import", action="store_true", help="also import torch_xla")
    preflight.set_defaults(func=run_preflight)
    return parser


def job_overrides(args: argparse.Namespace) -> dict[str, Any]:
    from trainer.config import parse_override, parse_scalar

    overrides: dict[str, Any] = {}
    for flag, key in FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides[key] = parse_scalar(value) if flag in ("cores", "val_check_interval") else value
    if args.no_progress:
        overrides["trainer.progress_bar"] = False
    overrides.update(diagnostic_overrides(args))
    for text in args.overrides:
        key, value = parse_override(text)
        overrides[key] = value
    return overrides


def run_train(args: argparse.Namespace) -> int:
    from trainer.config import load_job_config
    from trainer.engine import Trainer
    from trainer.runtime.seeding import seed_everything
    from trainer.spelling import Spelling

    job = load_job_config(args.config, job_overrides(args))
    trainer = Trainer.from_job(job, Spelling(args.options_from))  # validates devices, mesh, profile; no torch yet
    trainer.check_run_dir()  # a gs:// bucket that cannot be written fails before the model is even built
    seed_everything(job.trainer.seed)  # the module's initial weights: same seed, same weights
    module = instantiate_module(job.module, job.module_args)
    from trainer.fit.preemption import TrainingInterrupted

    try:
        result = trainer.fit(module)
    except TrainingInterrupted as stop:
        print(f"interrupted: {stop}", file=sys.stderr)
        return stop.exit_code
    shown = {k: round(v, 4) for k, v in result.metrics.items()}
    print(f"done: {shown}; compiles per epoch {result.compiles_per_epoch}; outputs in {result.run_url or result.run_dir}")
    return 0


def instantiate_module(spec: str, module_args: dict) -> Any:
    """Import "package.module:Class" and build it with `module_args`."""
    modname, _, clsname = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(modname), clsname)
    except (ImportError, AttributeError) as exc:
        raise UserError(
            f"cannot load the module {spec!r}: {exc}. Fix: pass --module package.module:Class with "
            "the package importable from here (installed, or on PYTHONPATH)."
        ) from exc
    try:
        inspect.signature(cls).bind(**module_args)
    except TypeError as exc:
        raise UserError(
            f"module_args {module_args} do not fit {spec}{inspect.signature(cls)}: {exc}. Fix the "
            "keys under module_args in the job YAML or --set module_args.KEY=VALUE."
        ) from exc
    return cls(**module_args)


def run_env(args: argparse.Namespace) -> int:
    from trainer.runtime.profiles import check_runtime_supported, export_lines, load_profile

    profile = load_profile(args.profile)
    check_runtime_supported(profile)
    print(export_lines(profile.render(devices=args.cores or profile.devices_per_host or 1)))
    return 0


def run_preflight(args: argparse.Namespace) -> int:
    from trainer.runtime.startup import check_version_pair

    torch_version, xla_version = check_version_pair()
    print(f"torch {torch_version} + torch_xla {xla_version}: a matched pair")
    if args.do_import:
        import torch_xla

        print(f"import torch_xla: ok ({torch_xla.__file__})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname).1s %(name)s: %(message)s", stream=sys.stderr)
    logging.captureWarnings(True)
    try:
        return args.func(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USER_ERROR_EXIT_CODE


def run() -> None:
    """The process entry point (`tpu-trainer`, `python -m trainer`): `main()`, then exit at once.

    By the time `main()` returns, everything a run writes is closed and fsynced (outputs,
    checkpoints, manifests). What is left is interpreter teardown, which with torch_xla's
    runtime loaded takes seconds (measured: about 4 s of a 3-epoch run's 15 s), and during
    which a late SIGTERM would kill the process with the default handler. So stdout, stderr
    and the stderr filter are flushed and the process exits with main()'s code directly.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    from trainer.diagnostics.quiet_logs import restore_stderr

    restore_stderr()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    run()
