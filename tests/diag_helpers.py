"""A minimal hand-written XLA loop driven through `RunDiagnostics`, the way the engine will call it."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import DiagnosticsConfig
from trainer.diagnostics.run import RunDiagnostics
from trainer.fit.reporter import StepReporter


def run_steps(device, batches: list, config: DiagnosticsConfig | None = None, log_every: int = 2,
              user_step: Callable | None = None, run_dir=None, seed: int = 0) -> tuple[RunDiagnostics, list]:
    """Train a small MLP on `batches` (host tensors (x, y)); returns the diagnostics and its epoch rows."""
    import torch_xla

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    reporter = StepReporter(lambda *a: None)  # the engine's own asynchronous loss reader
    diag = RunDiagnostics(config or DiagnosticsConfig(quiet_xla_logs=False), log_every_n_steps=log_every)
    diag.start(pjrt_device="CPU", xla_version=torch_xla.__version__, run_dir=run_dir)
    rows = []
    for step, (x, y) in enumerate(batches, start=1):
        batch = (x.to(device), y.to(device))
        diag.before_step(step, batch)
        logits = model(batch[0])
        loss = (user_step or (lambda l, lg: l))(F.cross_entropy(logits, batch[1]), logits)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % log_every == 0:
            reporter.schedule({"loss": loss.detach()}, {}, step, 1)
        torch_xla.sync()
        diag.after_step(step, is_logging_step=step % log_every == 0)
    reporter.drain()
    rows.append(diag.epoch_end())
    return diag, rows


def batches(n: int, size: int = 16, shapes: dict | None = None, seed: int = 0) -> list:
    """`n` batches of (x [size, 32], y [size]); `shapes={step: size}` changes one step's batch size."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(1, n + 1):
        rows = (shapes or {}).get(step, size)
        out.append((torch.randn(rows, 32, generator=g), torch.randint(0, 4, (rows,), generator=g)))
    return out
