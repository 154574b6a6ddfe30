"""`invoke bench`: the engine against a hand-written best-practice torch_xla loop (a benchmark,
never a pass/fail test). `workloads` holds what is measured, `rounds` runs interleaved rounds
inside one process per device configuration, `wall` times whole short processes, and
`report` writes the table (Markdown + JSON) into a run directory."""
