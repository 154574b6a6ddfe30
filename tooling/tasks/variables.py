"""make variables -> task options, through the one table; and the tables `make help` and
`invoke settings` print.

The Makefile passes the variables given on its command line as they are (`--var
CORES=8`); here each one is looked up among its task's names: `CORES` of `train` is the
engine's `devices`, given as `--cores` so that an error quotes `CORES` back. An unknown
name is refused with the nearest one. Standard library only: `make help` runs
`python3 -m tooling.tasks.variables Makefile` before any venv exists.
"""
from __future__ import annotations

import difflib
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tooling.errors import ToolingError
from tooling.tasks.options import TABLE, for_task
from trainer.settings import Setting

REMAINDER = "--"


@dataclass(frozen=True)
class Given:
    """One `NAME=VALUE` from make, resolved: the setting, the flag it stands for, the text."""

    variable: str
    setting: Setting
    flag: str
    value: str

    @property
    def parameter(self) -> str:
        """The invoke task's parameter (`--cores` -> cores), or REMAINDER for the words after `--`."""
        return REMAINDER if self.flag == REMAINDER else self.flag[2:].replace("-", "_")


def scope(task: str) -> dict[str, tuple[Setting, str]]:
    """Every make variable `task` takes -> (its setting, the flag it stands for)."""
    return {variable: (s, s.flag_for(variable)) for s in for_task(task) for variable in s.make_names}


def resolve(task: str, words: list[str]) -> list[Given]:
    """`NAME=VALUE` words given to `make TASK` -> options; an empty value counts as not given."""
    names = scope(task)
    out = []
    for word in words:
        variable, sep, value = word.partition("=")
        if not sep:
            raise ToolingError(f"make {task} was passed {word!r}, not NAME=VALUE; this is a bug in the Makefile.")
        if variable not in names:
            raise unknown(task, variable, value, names)
        if value != "":
            out.append(Given(variable, *names[variable], value))
    return out


def unknown(task: str, variable: str, value: str, names: dict[str, tuple[Setting, str]]) -> ToolingError:
    close = difflib.get_close_matches(variable, list(names), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]}={value}?" if close else ""
    takes = ", ".join(_aliases(names)) or "no variables"
    return ToolingError(f"make {task} does not take {variable}={value}.{hint} make {task} takes {takes} "
                        f"(each explained by `invoke settings --task {task}`). Fix: spell it as one of those.")


def _aliases(names: dict[str, tuple[Setting, str]]) -> list[str]:
    """`DEVICES (or CORES)`: each setting once, its own name first."""
    return [f"{v[0]} (or {', '.join(v[1:])})" if len(v) > 1 else v[0] for v in _per_setting(names)]


def _per_setting(names: dict[str, tuple[Setting, str]]) -> list[list[str]]:
    grouped: dict[int, list[str]] = {}
    for variable, (s, _) in names.items():
        grouped.setdefault(id(s), []).append(variable)
    return list(grouped.values())


def describe(task: str = "") -> str:
    """The table in every spelling, for `invoke settings`: make variables, flags, keyword, key, help."""
    lines = []
    for s in TABLE:
        if task and task not in s.commands:
            continue
        flags = "after --" if s.flags == (REMAINDER,) else ", ".join(s.flags)
        where = [flags] + ([", ".join(f"Trainer({name}=...)" for name in s.names("python"))] if s.keyword else [])
        where += [s.key] if s.key else []
        variables = ", ".join(s.make_names) or "(no make variable)"
        lines.append(f"{variables}   [{', '.join(s.commands)}]")
        lines.append(textwrap.fill(" · ".join(where), 100, initial_indent="    ", subsequent_indent="    "))
        lines.append(textwrap.fill(s.help, 100, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(lines)


TARGET = re.compile(r"^([a-z-]+):.*?## (.*)$")
RECIPE = re.compile(r"from-make (\S+)")


def make_help(makefile: Path) -> str:
    """`make help`: every target with its doc comment and the variables its task takes."""
    lines, target = [], None
    for line in makefile.read_text().splitlines():
        found = TARGET.match(line)
        if found:
            target = found.group(1)
            lines.append(f"  {target:<16}{found.group(2)}")
            continue
        recipe = RECIPE.search(line)
        if target and recipe:
            names = " ".join("|".join(v) for v in _per_setting(scope(recipe.group(1))))
            if names:
                lines.append(textwrap.fill(names, 100, initial_indent=" " * 18, subsequent_indent=" " * 18))
        target = None if not line.startswith("\t") else target
    lines.append("\nmake TARGET NAME=VALUE ...; `invoke settings` explains every variable in every spelling "
                 "(make, invoke/CLI flag, Trainer keyword, config key).")
    return "\n".join(lines)


if __name__ == "__main__":
    print(make_help(Path(sys.argv[1] if len(sys.argv) > 1 else "Makefile")))
