"""The XLA runtime: profiles (`profiles`), device selection (`devices`), TPU detection
(`tpu_host`), start-up (`startup`), seeding, notebooks, and every torch_xla call the loop,
data path and checkpoints make (`backend`). Everything but `backend` and `startup.start_xla`
imports no torch.

`from trainer.runtime import plan_runtime` (the module's path before it became a package)
still works: the start-up names are re-exported lazily.
"""


from trainer.moved import exports_of

__getattr__ = exports_of(__name__, __path__, "startup")
