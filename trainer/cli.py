"""`tpu-trainer`: the command line of the engine (also `python -m trainer`).

    tpu-trainer train [--devices 8] [--precision bf16] [--config job.yaml] [--set key=value ...]
    tpu-trainer env [--profile cpu] [--devices 8]  # the exports `train` would set, for `eval`
    tpu-trainer preflight [--import]               # version pair (and torch_xla import) check

The flags come from `trainer.settings`' table. The entry point only parses, builds, runs and
closes. A `UserError` is printed as one paragraph without a traceback and exits with code 2.
"""
from __future__ import annotations

import argparse
import os
import importlib
import inspect
import logging
import sys
from typing import Any, Sequence

from trainer import settings
from trainer.errors import USER_ERROR_EXIT_CODE, UserError


class _Given(argparse.Action):
    """Keeps the flag the user typed with the text they gave, so errors can quote their alias."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, (option_string, values))


def add_settings(parser: argparse.ArgumentParser, command: str) -> None:
    """One flag (with its aliases) per setting of `command` in trainer.settings' table, by config section."""
    groups: dict[str | None, Any] = {None: parser, "trainer": parser}
    for item in settings.for_command(command):
        switch = item.kind == "switch"
        if item.section not in groups:
            groups[item.section] = parser.add_argument_group(f"{item.section} ({item.section}.* config keys)")
        groups[item.section].add_argument(*item.flags, dest=item.name, action=_Given, nargs=0 if switch else None,
                                          default=argparse.SUPPRESS, help=item.help, choices=item.choices or None,
                                          metavar=None if switch else item.metavar)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpu-trainer", description="Train PyTorch modules on XLA devices (TPU, or CPU-emulated).")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train a job (default: MLP on the 8x8 digits)")
    add_settings(train, "train")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override any config key, e.g. --set module_args.lr=0.01 (repeatable)")
    train.set_defaults(func=run_train)

    env = commands.add_parser("env", help="print the exports of an environment profile for the devices a run uses")
    add_settings(env, "env")
    env.set_defaults(func=run_env)

    tokenize = commands.add_parser("tokenize", help="tokenize a text corpus into token shards for `data:` "
                                   "(every core; a re-run after an interruption skips finished shards)")
    add_settings(tokenize, "tokenize")
    tokenize.set_defaults(func=run_tokenize)

    for sub in (train, env, tokenize):
        sub.add_argument("--options-from", choices=settings.FRONT_ENDS[1:], default="cli",
                         help="how errors spell options: as these flags (default) or as make variables (DEVICES=...)")

    preflight = commands.add_parser("preflight", help="check the torch/torch_xla pair")
    preflight.add_argument("--import", dest="do_import", action="store_true", help="also import torch_xla")
    preflight.set_defaults(func=run_preflight)
    return parser


def given(args: argparse.Namespace) -> tuple[dict[str, Any], settings.Spelling]:
    """The settings on the command line as {name: value}, and how the user spelled them."""
    typed = {item.name: getattr(args, item.name) for item in settings.for_command(args.command)
             if hasattr(args, item.name)}
    spelling = settings.Spelling.from_flags(args.options_from, {name: flag for name, (flag, _) in typed.items()},
                                            args.command)
    return {name: _value(settings.setting(name), text, spelling) for name, (_, text) in typed.items()}, spelling


def _value(item: settings.Setting, text: Any, spelling: settings.Spelling) -> Any:
    from trainer.config import parse_scalar

    if item.kind == "switch":
        return item.switch
    if item.kind == "yaml":
        return parse_scalar(text)
    if item.kind == "text":
        return text
    number = {"int": int, "float": float}[item.kind]
    try:
        return number(text)
    except ValueError:
        what = "an integer" if number is int else "a number"
        raise UserError(f"{spelling.assign(item.name, text)} is not {what}. {spelling.name(item.name)} takes {what}: "
                        f"{item.help}. Fix: e.g. `{spelling.example(item.name, 1)}`.") from None


def job_overrides(values: dict[str, Any], sets: Sequence[str] = ()) -> dict[str, Any]:
    """Dotted config keys from the flags' values, then `--set` (later wins)."""
    from trainer.config import parse_override

    overrides = {settings.setting(name).key: value for name, value in values.items()
                 if settings.setting(name).key is not None}
    for text in sets:
        key, value = parse_override(text)
        overrides[key] = value
    return overrides


def run_train(args: argparse.Namespace) -> int:
    from trainer.config import load_job_config
    from trainer.engine import Trainer
    from trainer.runtime.seeding import seed_everything

    values, spelling = given(args)
    job = load_job_config(values.get("config"), job_overrides(values, args.overrides))
    trainer = Trainer.from_job(job, spelling)  # validates devices, mesh, profile; no torch yet
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
    """What `train` with the same devices and profile would export: the same parser, the same defaults."""
    from trainer.config import load_job_config
    from trainer.runtime.profiles import export_lines
    from trainer.runtime.startup import plan_runtime

    values, spelling = given(args)
    options = load_job_config(None, job_overrides(values)).trainer
    print(export_lines(plan_runtime(options.devices, options.env_profile, spelling=spelling).env))
    return 0


def run_tokenize(args: argparse.Namespace) -> int:
    from trainer.data.tokens.tokenize_corpus import report, tokenize

    values, spelling = given(args)
    for required in ("input", "out"):
        if required not in values:
            raise UserError(f"tokenize needs {spelling.name(required)}: {settings.setting(required).help}. Fix: "
                            f"e.g. `{spelling.example('input', 'texts/')}` with {spelling.name('out')} DIR.")
    out = values["out"]
    local = tokenize(values["input"], out, values.get("tokenizer", "bytes"), values.get("train_bpe", 0),
                     values.get("jsonl_field"), int(values.get("shard_megabytes", 64) * (1 << 20)),
                     values.get("workers", 0))
    print(report(local, out))
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
