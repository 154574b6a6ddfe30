"""The fan-out with local processes: prefixes, line splitting, stop-the-rest (run: `pytest tests/test_fanout.py`).

Real processes and signals, no network; the ssh and gcloud tests run the same code over
real connections.
"""
from __future__ import annotations

import io
import time

from tooling.pod.fanout import fan_out


def bash(script: str) -> list[str]:
    return ["bash", "-c", script]


def test_lines_are_prefixed_per_worker_and_carriage_returns_end_lines() -> None:
    out = io.StringIO()
    outcome = fan_out(
        [bash(r'printf "10%%\r50%%\r100%%\nok\n"; printf "no newline"'), bash("echo two >&2")],
        ["[worker 0] ", "[worker 1] "], out=out,
    )  # fmt: skip
    assert outcome.ok and outcome.codes == (0, 0)
    lines = out.getvalue().splitlines()
    assert [line for line in lines if line.startswith("[worker 0] ")] == [
        "[worker 0] 10%", "[worker 0] 50%", "[worker 0] 100%", "[worker 0] ok", "[worker 0] no newline",
    ]  # fmt: skip
    assert "[worker 1] two" in lines
    assert outcome.tails[0][-1] == "no newline"


def test_first_failure_kills_the_others_locally_when_no_remote_stop_is_given() -> None:
    start = time.monotonic()
    outcome = fan_out(
        [bash("sleep 60"), bash("sleep 0.3; echo boom; exit 4"), bash("trap '' TERM; sleep 60")],
        ["a ", "b ", "c "], out=io.StringIO(),
    )  # fmt: skip
    assert outcome.first_failure == 1
    assert outcome.codes == (None, 4, None), "stopped workers report no exit code of their own"
    assert outcome.tails[1] == ("boom",)
    assert time.monotonic() - start < 15, "a worker ignoring SIGTERM must get SIGKILL"


def test_the_stop_callback_runs_for_each_running_worker_only() -> None:
    stopped: list[int] = []
    outcome = fan_out(
        [bash("sleep 60"), bash("exit 2"), bash("sleep 60")], ["a ", "b ", "c "],
        stop=stopped.append, grace_seconds=0.2, out=io.StringIO(),
    )  # fmt: skip
    assert outcome.first_failure == 1
    assert sorted(stopped) == [0, 2]


def test_without_stop_on_failure_every_command_runs_to_its_end() -> None:
    outcome = fan_out(
        [bash("exit 3"), bash("sleep 0.5; echo done")], ["a ", "b "], out=io.StringIO(), stop_on_failure=False
    )
    assert outcome.codes == (3, 0) and outcome.first_failure == 0
    assert outcome.tails[1] == ("done",)
