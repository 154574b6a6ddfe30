"""The XLA runtime: profiles (`profiles`), device selection (`devices`), TPU detection
(`tpu_host`), start-up (`startup`), seeding, notebooks, and every torch_xla call the loop,
data path and checkpoints make (`backend`). Everything but `backend` and `startup.start_xla`
imports no torch.

`from trainer.runtime import plan_runtime` (the module's path before it became a package)
still works: the start-up names are re-exported lazily.
"""


def __getattr__(name: str):
    import importlib
    import pkgutil

    if name.startswith("_") or name in {m.name for m in pkgutil.iter_modules(__path__)}:
        raise AttributeError(name)  # a submodule: let the import system load it
    try:
        return getattr(importlib.import_module(__name__ + ".startup"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
