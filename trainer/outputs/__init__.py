"""What a run writes: the run directory and its files (`run_outputs`), the run manifest
(`run_manifest`), and whole-or-absent file replacement (`atomic_files`).

`from trainer.outputs import RunOutputs` (the module's path before it became a package)
still works: its names are re-exported lazily.
"""


def __getattr__(name: str):
    import importlib
    import pkgutil

    if name.startswith("_") or name in {m.name for m in pkgutil.iter_modules(__path__)}:
        raise AttributeError(name)  # a submodule: let the import system load it
    try:
        return getattr(importlib.import_module(__name__ + ".run_outputs"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
