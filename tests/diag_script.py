"""Run as a script by tests/test_diagnostics_processes.py: a fresh process, so XLA's settings apply.

    python diag_script.py MODE RUN_DIR
MODE: debug (host reads named with the Python line), spmd (8-device SPMD compiles),
spmd-unfiltered (the same without our log filter: the negative control), profile.
"""
import os
import sys
import warnings
from pathlib import Path

mode, run_dir = sys.argv[1], Path(sys.argv[2])
os.environ["PJRT_DEVICE"] = "CPU"
os.environ["CPU_NUM_DEVICES"] = "8" if mode.startswith("spmd") else "1"

from trainer.config import DiagnosticsConfig  # noqa: E402
from trainer.diagnostics.run import RunDiagnostics  # noqa: E402

config = DiagnosticsConfig(debug=mode == "debug", quiet_xla_logs=mode != "spmd-unfiltered")
diag = RunDiagnostics(config)
os.environ.update(diag.environment())  # before torch_xla does any work, as the engine must

import torch  # noqa: E402
import torch_xla  # noqa: E402


def user_training_step(model, x):
    loss = model(x).pow(2).mean()
    if loss.item() > 1e6:  # a host read in user code: the detector must name this line
        print("diverged")
    return loss


if mode == "debug":
    run_dir.mkdir(parents=True)
    diag.start("CPU", torch_xla.__version__, run_dir)
    device = torch_xla.device()
    model = torch.nn.Linear(16, 16).to(device)
    for step in range(1, 5):
        x = torch.randn(8, 16).to(device)
        diag.before_step(step, (x,))
        user_training_step(model, x).backward()
        torch_xla.sync()
        diag.after_step(step, is_logging_step=False)
    summary = diag.finish(run_dir)
    import json

    print(json.dumps({k: summary[k] for k in ("host_read_steps", "xla_debug_log", "xla_metrics_report")}))
else:
    import numpy as np
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    diag.start("CPU", torch_xla.__version__)
    mesh = xs.Mesh(np.arange(8), (8,), ("data",))
    device = torch_xla.device()
    w = torch.randn(16, 16).to(device)
    for step, rows in enumerate((8, 16, 24, 32), start=1):  # four shapes: four SPMD compilations
        x = torch.randn(rows, 16).to(device)
        xs.mark_sharding(x, mesh, ("data", None))
        y = (x @ w).relu().sum()  # kept alive: a sync only runs graphs for live tensors
        torch_xla.sync()
        if step == 2:
            warnings.warn("a different warning from Python")
            os.write(2, b"2026-01-01 00:00:00.000000: W external/xla/xla/other.cc:1] a different XLA warning\n")
    from trainer.diagnostics.xla_metrics import compile_count  # noqa: E402

    print("compiles", compile_count())
