"""One device configuration, one process: interleaved rounds of engine and plain loop.

    python -m tooling.bench.rounds --devices 1|8 --workload mlp --rounds 3 --epochs 3 --out FILE.json

1-device and SPMD runs cannot share a process (SPMD mode and the device count are
process-wide), so `invoke bench` starts this once per configuration. Inside, rounds
alternate which side goes first, so drift (another job on the shared cores, caches)
falls on both. Steady figures use epochs 2..N; round 1 carries the compilations.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _xla_counts() -> dict:
    from trainer.diagnostics import xla_metrics

    snap = xla_metrics.snapshot()
    return {"compiles": snap.compiles, "execute_seconds": snap.execute_seconds, "executions": snap.executions,
            "item_reads": snap.scalar_reads}


def engine_round(workload, devices: int, epochs: int, log_every: int, root: Path, index: int) -> dict:
    from trainer.cli import instantiate_module
    from trainer.engine import Trainer

    module = instantiate_module(workload.engine_module, {})
    marks: list[float] = []
    original = module.training_step

    def timed(batch, batch_idx):  # the 2nd call starts after the 1st step's sync: time to first step
        if len(marks) < 2:
            marks.append(time.perf_counter())
        return original(batch, batch_idx)

    module.training_step = timed
    trainer = Trainer(devices=devices, max_epochs=epochs, env_profile="cpu", run_dir=str(root / f"engine-{index}"),
                      log_every_n_steps=log_every, progress_bar=True, **workload.engine_options)
    before, start = _xla_counts(), time.perf_counter()
    result = trainer.fit(module)
    after = _xla_counts()
    steps = workload.steps_per_epoch
    steady = [row["epoch_seconds"] / steps for row in result.history[1:]]
    total_steps = steps * epochs
    return {
        "step_seconds": statistics.median(steady),
        "execute_seconds_per_step": (after["execute_seconds"] - before["execute_seconds"]) / total_steps,
        "compiles_after_warmup": sum(result.compiles_per_epoch[1:]),
        "host_reads_per_step_outside_logging": max(0, after["item_reads"] - before["item_reads"]
                                                   - total_steps // log_every) / total_steps,
        "first_step_seconds": (marks[1] if len(marks) > 1 else time.perf_counter()) - start,
    }


def plain_round(workload, device, mesh, epochs: int, log_every: int) -> dict:
    import torch_xla

    before, start = _xla_counts(), time.perf_counter()
    marks: list[float] = []
    model, optimizer, device_loader = workload.plain_setup(device, mesh)
    epoch_seconds, compiles = [], []
    for epoch in range(epochs):
        c0, t0 = _xla_counts()["compiles"], time.perf_counter()
        workload.plain_epoch(model, optimizer, device_loader, log_every,
                             on_step=lambda i: len(marks) < 1 and marks.append(time.perf_counter()))
        torch_xla.sync()
        torch_xla._XLAC._xla_wait_device_ops([])  # the epoch ends when the device is done, as the engine's read does
        epoch_seconds.append(time.perf_counter() - t0)
        compiles.append(_xla_counts()["compiles"] - c0)
    after = _xla_counts()
    steps, total_steps = workload.steps_per_epoch, workload.steps_per_epoch * epochs
    return {
        "step_seconds": statistics.median(s / steps for s in epoch_seconds[1:]),
        "execute_seconds_per_step": (after["execute_seconds"] - before["execute_seconds"]) / total_steps,
        "compiles_after_warmup": sum(compiles[1:]),
        "host_reads_per_step_outside_logging": max(0, after["item_reads"] - before["item_reads"]
                                                   - total_steps // log_every) / total_steps,
        "first_step_seconds": (marks[0] if marks else time.perf_counter()) - start,
    }


def lightning_round(workload, epochs: int, log_every: int) -> dict:
    """The workload's LightningModule through Lightning's own Trainer on XLA (one device)."""
    import torch_xla

    from tooling.bench.lightning_side import EpochClock, lightning_fit

    clock = EpochClock(lambda: _xla_counts()["compiles"], lambda: torch_xla._XLAC._xla_wait_device_ops([]))
    before, start = _xla_counts(), time.perf_counter()
    lightning_fit(epochs, log_every, clock)
    after = _xla_counts()
    steps, total_steps = workload.steps_per_epoch, workload.steps_per_epoch * epochs
    return {
        "step_seconds": statistics.median(s / steps for s in clock.epoch_seconds[1:]),
        "execute_seconds_per_step": (after["execute_seconds"] - before["execute_seconds"]) / total_steps,
        "compiles_after_warmup": sum(clock.epoch_compiles[1:]),
        "host_reads_per_step_outside_logging": max(0, after["item_reads"] - before["item_reads"]
                                                   - total_steps // log_every) / total_steps,
        "first_step_seconds": (clock.second_batch_at or time.perf_counter()) - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    os.environ.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(args.devices)})
    import numpy as np
    import torch_xla
    import torch_xla.runtime as xr

    from tooling.bench.workloads import WORKLOADS

    workload = WORKLOADS[args.workload]
    mesh = None
    if args.devices > 1:
        import torch_xla.distributed.spmd as xs

        xr.use_spmd()
        mesh = xs.Mesh(np.arange(args.devices), (args.devices,), ("data",))
    device = torch_xla.device()
    sides = workload.sides
    rounds: dict[str, list] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for index in range(args.rounds):
            order = sides[index % len(sides):] + sides[:index % len(sides)]  # each side leads in turn
            for side in order:
                if side == "engine":
                    rounds[side].append(engine_round(workload, args.devices, args.epochs, args.log_every, Path(tmp), index))
                elif side == "lightning":
                    rounds[side].append(lightning_round(workload, args.epochs, args.log_every))
                else:
                    rounds[side].append(plain_round(workload, device, mesh, args.epochs, args.log_every))
                print(f"{args.workload} x{args.devices} round {index + 1} {side}: "
                      f"{rounds[side][-1]['step_seconds'] * 1e3:.2f} ms/step", file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps({"workload": args.workload, "devices": args.devices, "rounds": rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
