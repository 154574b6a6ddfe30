"""The benchmark tasks: the engine against hand-written torch_xla loops, and gs:// checkpoints."""
from __future__ import annotations

from invoke import task

from tooling.tasks.options import help_for


@task(help=help_for("bench"))
def bench(c, workloads="mlp,fsdp,lightning", devices="1,8", rounds=3, epochs=3, wall_rounds=3, out=""):
    """Benchmark the engine against a hand-written torch_xla loop (figures, not pass/fail)."""
    from datetime import datetime
    from pathlib import Path

    from tooling.bench.report import run_bench

    out_dir = Path(out or f"runs/bench-{datetime.now():%Y%m%d-%H%M%S}")
    run_bench(out_dir, workloads.split(","), [int(d) for d in devices.split(",")], int(rounds), int(epochs),
              int(wall_rounds))
    print((out_dir / "bench.md").read_text())
    print(f"written: {out_dir}/bench.md, {out_dir}/bench.json")


@task(name="bench-storage", help=help_for("bench-storage"))
def bench_storage(c, megabytes=300, rounds=3):
    """What a gs:// run directory costs per checkpoint, against a local Cloud Storage server (figures)."""
    from tooling.bench.storage import run_storage_bench

    print(run_storage_bench(int(megabytes), int(rounds)))


@task(name="bench-data", help=help_for("bench-data"))
def bench_data(c, seq_len=64, global_batch_size=64, step_ms=400.0, batches=100, bpe_vocab=4096):
    """Token shards against a step's need: tokenizer MB/s, loader tokens/s and waits, RssAnon (figures)."""
    from tooling.bench.data import run_data_bench

    print(run_data_bench(int(seq_len), int(global_batch_size), float(step_ms), int(batches), int(bpe_vocab)))
