"""The engine's tasks: train, env (the CLI's own flags), test, reproduce, settings."""
from __future__ import annotations

import inspect
import shlex

from invoke import Exit, task

from tooling.tasks.common import TRAINER, pytest, run, tooling_errors
from tooling.tasks.options import for_task, help_for
from tooling.tasks.variables import describe


def _flags(command: str) -> dict[str, str]:
    """Every flag of `command`, aliases too, by invoke parameter: {"cores": "--cores", ...}."""
    return {flag[2:].replace("-", "_"): flag for s in for_task(command) for flag in s.flags}


def cli_task(command: str):
    """`@task` whose options are the flags of `tpu-trainer COMMAND` in the table, aliases included, so
    the engine sees (and its errors quote) the one the user typed. The body gets them as keywords."""
    def wrap(body):
        parameters = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        helps = {}
        for s in for_task(command):
            for i, flag in enumerate(s.flags):
                name = flag[2:].replace("-", "_")
                default = False if s.kind == "switch" else None
                parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
                helps[name] = s.help if i == 0 else f"the same as {s.flags[0]}"
        body.__signature__ = inspect.Signature(parameters)  # what invoke reads to build the options
        return task(body, help=helps, auto_shortflags=False)

    return wrap


def cli_argv(command: str, options: dict) -> list[str]:
    """`tpu-trainer COMMAND` with each option given under the flag it was given as."""
    argv = TRAINER + [command]
    flags = _flags(command)
    for name, value in options.items():
        if value is None or value is False or name in ("args", "from_make"):
            continue
        argv += [flags[name]] if value is True else [flags[name], str(value)]
    return argv + (["--options-from", "make"] if options.get("from_make") else [])


@cli_task("train")
def train(c, **options):
    """Train a job on XLA with the engine's CLI (default: an MLP on the 8x8 digits).

    Exit codes: 0 done, 2 a config/user error, 143 stopped by SIGTERM and 130 by SIGINT
    (a checkpoint was written; rerun with --resume auto to continue exactly).
    """
    run(c, cli_argv("train", options) + shlex.split(options.get("args") or ""))


@cli_task("env")
def env(c, **options):
    """Print the exports `train` would set here, for `eval "$(invoke env --devices 8)"`.

    The same device values and defaults as train (1 device; profile auto: tpu-vm on a TPU host).
    """
    result = c.run(shlex.join(cli_argv("env", options)), hide="out", warn=True)
    if result.exited:
        raise Exit(code=result.exited)
    print(result.stdout, end="")


@cli_task("tokenize")
def tokenize(c, **options):
    """Tokenize a text corpus into token shards (`data:` in a job YAML trains from them).

    Uses every core; a re-run after an interruption skips the shards already done.
    """
    run(c, cli_argv("tokenize", options))


@task(help=help_for("test"))
def test(c, marker="not docker", k=None, args=""):
    """Run the test suite on CPU-emulated XLA (the image tests run with `invoke test-image`)."""
    pytest(c, marker, (["-k", k] if k else []) + shlex.split(args))


@task(help=help_for("reproduce"))
def reproduce(c, run_dir, out="runs"):
    """Re-run RUN_DIR's exact job (in its image when it had one) and report whether the losses match.

    Exits 0 when every logged loss is bitwise identical, 1 otherwise.
    """
    from pathlib import Path

    from tooling.reproduce import reproduce as rerun

    with tooling_errors():
        comparison = rerun(Path(run_dir), Path(out))
    print(comparison.describe())
    if not comparison.equal:
        raise Exit(code=1)


@task(help=help_for("settings"))
def settings(c, task=""):
    """Every option in every spelling: make variables, flags, Trainer keyword, config key, help."""
    print(describe(task))
