"""`invoke bench-storage`: what a gs:// run directory costs per checkpoint.

Saves a checkpoint of a given size (random float32 tensors, so nothing compresses) the
way the engine does: into the local run directory (`CheckpointStore.save`: write, fsync,
hash, commit), then, for a gs:// run, publishes it (`RunMirror.publish_checkpoints`:
upload, MD5 check, conditional manifest commit), and pulls it back as a resume on a new
machine would (`RunMirror.prepare`). The server is `gcp-storage-emulator` on 127.0.0.1
(started here), so the figures are this code's cost plus a local HTTP server's, not
Cloud Storage's network: on a TPU VM expect the bucket's bandwidth to dominate.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path


def run_storage_bench(megabytes: int, rounds: int) -> str:
    import torch

    from trainer.checkpoint.store import CheckpointStore
    from trainer.storage.mirror import RunMirror

    from tooling.storage_emulator import free_port, start_emulator

    work = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    port = free_port()
    server = start_emulator(work, "bench", port)
    os.environ.update(STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{port}", TPU_TRAINER_STAGING_DIR=str(work / "staging"))
    try:
        g = torch.Generator().manual_seed(0)
        state = {"module": {f"w{i}": torch.randn(1 << 20, generator=g) for i in range(megabytes // 4)}}
        local, remote, pull = [], [], []
        for i in range(rounds):
            store = CheckpointStore(work / f"local-{i}" / "checkpoints")
            store.start()
            started = time.perf_counter()
            store.save(state, "step-00000001.ckpt", {"global_step": 1})
            local.append(time.perf_counter() - started)

            mirror = RunMirror.connect(f"gs://bench/runs/r{i}", "bench")
            staging = mirror.prepare(resuming=False, owner=True)
            started = time.perf_counter()
            staged = CheckpointStore(staging / "checkpoints")
            staged.start()
            staged.save(state, "step-00000001.ckpt", {"global_step": 1})
            mirror.publish_checkpoints()
            remote.append(time.perf_counter() - started)

            fresh = RunMirror.connect(f"gs://bench/runs/r{i}", "bench")
            started = time.perf_counter()
            fresh.prepare(resuming=True, owner=True)
            pull.append(time.perf_counter() - started)
        size = (work / "local-0" / "checkpoints" / "step-00000001.ckpt").stat().st_size / 1e6
    finally:
        server.kill()
        server.wait()
    lo, re_, pu = (statistics.median(x) for x in (local, remote, pull))
    return "\n".join([
        f"# gs:// checkpoint cost: {size:.0f} MB checkpoint, median of {rounds} rounds (gcp-storage-emulator, 127.0.0.1)",
        "",
        "| what | seconds | MB/s |",
        "|---|---|---|",
        f"| local save (write, fsync, hash, commit) | {lo:.2f} | {size / lo:.0f} |",
        f"| gs:// save (local save + upload, MD5 check, manifest commit) | {re_:.2f} | {size / re_:.0f} |",
        f"| upload alone (difference) | {re_ - lo:.2f} | {size / max(re_ - lo, 1e-9):.0f} |",
        f"| pull for a resume (download, SHA-256 check) | {pu:.2f} | {size / pu:.0f} |",
        "",
        f"per-checkpoint overhead of gs:// over local: {re_ - lo:.2f} s ({re_ / lo:.1f}x)",
    ])

