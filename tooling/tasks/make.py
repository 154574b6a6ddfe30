"""`invoke from-make`: what every make target runs, with the variables make was given."""
from __future__ import annotations

from invoke import Collection, Context, Task, task

from tooling.errors import ToolingError
from tooling.tasks import bench, engine, images, pods
from tooling.tasks.common import tooling_errors
from tooling.tasks.variables import REMAINDER, Given, resolve

SWITCH_VALUES = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
                 "off": False, "": False}


def tasks() -> Collection:
    """Every task of the groups, by its invoke name."""
    collection = Collection()
    for module in (engine, images, pods, bench):
        for candidate in vars(module).values():
            if isinstance(candidate, Task):
                collection.add_task(candidate)
    return collection


@task(iterable=["var"], help={"target": "the task to run, e.g. train, env, build, pod",
                              "var": "NAME=VALUE, one variable given to make (repeatable)"})
def from_make(c, target, var=None):
    """Run task TARGET with make's variables (`make train DEVICES=8` -> `from-make train --var DEVICES=8`).

    Each NAME is looked up among TARGET's names in the settings table (`invoke settings`);
    an unknown one is refused with the nearest. Errors then quote the variables as given.
    """
    with tooling_errors():
        if target not in tasks().task_names:
            raise ToolingError(f"there is no task {target!r}; the tasks are {', '.join(sorted(tasks().task_names))}.")
        chosen = tasks()[target]
        options, remainder = _options(target, chosen, resolve(target, var or []))
    chosen(Context(config=c.config, remainder=remainder), **options)


def _options(target: str, chosen: Task, given: list[Given]) -> tuple[dict, str]:
    """Keyword arguments for the task, typed as its own defaults are, and the words after `--`."""
    defaults = {p.name: p.default for p in chosen.argspec(chosen.body).parameters.values()}
    options: dict = {"from_make": True} if "from_make" in defaults else {}
    remainder = ""
    for item in given:
        if item.parameter == REMAINDER:
            remainder = item.value
            continue
        default = defaults[item.parameter]
        if isinstance(default, bool):
            options[item.parameter] = _switch(target, item)
        elif isinstance(default, int):
            options[item.parameter] = _integer(target, item)
        elif item.parameter in chosen.iterable:
            options[item.parameter] = [item.value]
        else:
            options[item.parameter] = item.value
    return options, remainder


def _switch(target: str, item: Given) -> bool:
    if item.value.lower() in SWITCH_VALUES:
        return SWITCH_VALUES[item.value.lower()]
    raise ToolingError(f"{item.variable}={item.value!r} is a switch of make {target}: {item.setting.help}. "
                       f"Fix: {item.variable}=1 to turn it on, {item.variable}=0 (or leave it out) for off.")


def _integer(target: str, item: Given) -> int:
    try:
        return int(item.value)
    except ValueError:
        raise ToolingError(f"{item.variable}={item.value!r} is not an integer; make {target} takes "
                           f"{item.variable}=N: {item.setting.help}. Fix: e.g. {item.variable}=3.") from None
