"""What XLA is doing during a run: metrics, recompilations, host reads, profiles, cache, logs.

One concept per module; `RunDiagnostics` (trainer.diagnostics.run) is the one object the
training loop talks to. Importing this package imports no torch: the config validates
`--profile-steps` through `profile_window.StepWindow` before XLA starts.
"""
