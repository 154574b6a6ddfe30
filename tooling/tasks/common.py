"""What every task group shares: running a command, pytest, and the tooling's errors."""
from __future__ import annotations

import contextlib
import shlex
import sys

from invoke import Exit

from tooling.errors import ToolingError

TRAINER = [sys.executable, "-m", "trainer"]
PYTEST_NO_TESTS = 5


@contextlib.contextmanager
def tooling_errors():
    """A ToolingError is the user's to fix: its paragraph, exit 1, no traceback."""
    try:
        yield
    except ToolingError as err:
        raise Exit(str(err), code=1) from None


def run(c, argv: list[str]) -> None:
    """Run a command, streaming its output; fail with its exit code (its message is already shown)."""
    result = c.run(shlex.join(argv), pty=sys.stdout.isatty(), warn=True)
    if result.exited:
        raise Exit(code=result.exited)


def pytest(c, marker: str, extra: list[str]) -> None:
    """pytest -m MARKER; "no tests selected" (exit 5) is a failure, never a pass."""
    argv = [sys.executable, "-m", "pytest", "-m", marker] + extra
    result = c.run(shlex.join(argv), pty=sys.stdout.isatty(), warn=True)
    if result.exited == PYTEST_NO_TESTS:
        raise Exit(f"pytest selected no tests (-m {marker!r}); a run that tests nothing is a failure.", code=1)
    if result.exited:
        raise Exit(code=result.exited)
