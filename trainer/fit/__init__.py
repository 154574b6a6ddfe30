"""One fit: `session` (open, build, epochs, finish), `run_directory`, `setup` (the parts, one
typed `Fit`), `epochs`, `loop` (the step), `progress` (the step counter), `metrics` /
`reporter` / `step_logs` / `step_outputs` (what is measured, read and logged), `schedules`,
`precision`, `model_setup`, `preemption`."""
