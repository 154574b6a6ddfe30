"""The hand-written loop as a whole process (for the start-to-exit wall clock):

    python -m tooling.bench.plain_script --devices 1|8 --epochs 3 [--workload mlp]
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workload", default="mlp")
    args = parser.parse_args(argv)
    os.environ.update({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(args.devices)})
    import numpy as np
    import torch_xla
    import torch_xla.runtime as xr

    from tooling.bench.workloads import WORKLOADS

    mesh = None
    if args.devices > 1:
        import torch_xla.distributed.spmd as xs

        xr.use_spmd()
        mesh = xs.Mesh(np.arange(args.devices), (args.devices,), ("data",))
    workload = WORKLOADS[args.workload]
    losses: list[float] = []
    model, optimizer, device_loader = workload.plain_setup(torch_xla.device(), mesh)
    for _ in range(args.epochs):
        workload.plain_epoch(model, optimizer, device_loader, on_loss=losses.append)
    torch_xla.sync()
    torch_xla._XLAC._xla_wait_device_ops([])
    print(f"plain: {len(losses)} logged losses, last {losses[-1] if losses else float('nan'):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
