"""What a run writes: the run directory and its files (`run_outputs`), the run manifest
(`run_manifest`), and whole-or-absent file replacement (`atomic_files`).

`from trainer.outputs import RunOutputs` (the module's path before it became a package)
still works: its names are re-exported lazily.
"""


from trainer.moved import exports_of

__getattr__ = exports_of(__name__, __path__, "run_outputs")
