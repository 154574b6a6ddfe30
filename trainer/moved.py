"""Module paths from before the engine was grouped into subpackages, still importable.

User code, job YAMLs and old run manifests may name `trainer.loop`, `trainer.session`,
... An import of such a name returns the module at its new home (the same object, so
`isinstance` and monkeypatching see one module). Standard library only.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

OLD_TO_NEW = {
    "trainer.atomic_files": "trainer.outputs.atomic_files",
    "trainer.backend": "trainer.runtime.backend",
    "trainer.batches": "trainer.data.batches",
    "trainer.device_loader": "trainer.data.device_loader",
    "trainer.devices": "trainer.runtime.devices",
    "trainer.env_vars": "trainer.runtime.env_vars",
    "trainer.loop": "trainer.fit.loop",
    "trainer.model_setup": "trainer.fit.model_setup",
    "trainer.notebook": "trainer.runtime.notebook",
    "trainer.precision": "trainer.fit.precision",
    "trainer.preemption": "trainer.fit.preemption",
    "trainer.profiles": "trainer.runtime.profiles",
    "trainer.progress": "trainer.fit.progress",
    "trainer.run_manifest": "trainer.outputs.run_manifest",
    "trainer.sampling": "trainer.data.sampling",
    "trainer.schedules": "trainer.fit.schedules",
    "trainer.seeding": "trainer.runtime.seeding",
    "trainer.session": "trainer.fit.session",
    "trainer.spelling": "trainer.settings",
    "trainer.tpu_host": "trainer.runtime.tpu_host",
}
"""Old dotted name -> new one. `trainer.runtime` and `trainer.outputs` became packages of the
same name; their old attributes are re-exported lazily by the packages themselves."""


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):  # a placeholder, replaced in sys.modules by exec_module
        return None

    def exec_module(self, module) -> None:
        # The import system returns whatever sys.modules holds after exec_module: the real module.
        sys.modules[module.__name__] = importlib.import_module(self.target)


class MovedModules(importlib.abc.MetaPathFinder):
    """Resolves the old names of `OLD_TO_NEW` to their new modules."""

    def find_spec(self, fullname, path=None, target=None):
        new = OLD_TO_NEW.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def exports_of(package: str, path: list, module: str):
    """A package `__getattr__` that lends out `module`'s names: a module that became a package of
    the same name (`trainer.runtime`, `trainer.outputs`) keeps its old attributes. Submodules are
    left to the import system."""

    def __getattr__(name: str):
        import pkgutil

        if name.startswith("_") or name in {m.name for m in pkgutil.iter_modules(path)}:
            raise AttributeError(name)
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())  # last: a real module of that name always wins
