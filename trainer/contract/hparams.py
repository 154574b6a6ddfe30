"""`save_hyperparameters()` for a TrainModule, and the plain-data form every checkpoint stores.

Lightning's own `save_hyperparameters` (a LightningModule's) reads its `__init__`
arguments from the calling frame; ours does the same for a TrainModule, so
`self.hparams.lr` works in both. The values are written into every checkpoint
(`hyper_parameters`) and the run's config.yaml as plain data (numbers, strings, lists,
dicts; anything else as its `repr`), so a checkpoint still loads with
`torch.load(weights_only=True)`.
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable

_PLAIN = (bool, int, float, str, type(None))


class HParams(dict):
    """A dict whose keys also read as attributes (Lightning's AttributeDict)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no hyper-parameter {name!r} (saved: {', '.join(self) or 'none'})") from None


def init_arguments(frame: Any, names: Iterable[str] = (), ignore: Iterable[str] = ()) -> HParams:
    """The arguments of the `__init__` running in `frame` (those in `names`, if any), less `ignore`."""
    info = inspect.getargvalues(frame)
    values = {name: info.locals[name] for name in info.args[1:] if name in info.locals}
    if info.varargs and info.locals.get(info.varargs):
        values[info.varargs] = info.locals[info.varargs]
    values.update(info.locals.get(info.keywords, {}) if info.keywords else {})
    wanted, skipped = set(names), set(ignore)
    return HParams({k: v for k, v in values.items() if (not wanted or k in wanted) and k not in skipped})


def plain(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return repr(value)


def hyper_parameters(module: Any) -> dict | None:
    """What the module's save_hyperparameters() recorded, as plain data (None: nothing saved)."""
    hparams = getattr(module, "hparams", None)
    return plain(dict(hparams)) if hparams else None
