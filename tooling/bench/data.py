"""`invoke bench-data`: token shards against what a training step consumes (figures, not pass/fail).

On the standard library's top-level sources (bytelm's corpus, about 4.7 MB), each figure in
its own fresh process so one does not warm another's caches:
- tokenizer throughput in MB of text per second, bytes and a byte-level BPE trained on the
  corpus first (the BPE's training time is reported apart), on every core;
- loader throughput in tokens per second, local and gs:// shards (gcp-storage-emulator on
  127.0.0.1: this code's cost plus a local HTTP server's, not Cloud Storage's network),
  against the tokens per second a step of the example job consumes (`--step-ms`: a step
  of bytelm's shape on this machine, measured by `invoke bench`'s lm figures or given);
- the shortest step the slower of the two still feeds with a 10x margin (a TPU step is
  milliseconds, a CPU-XLA one hundreds);
- the time a step waits for its batch, 99th percentile, as a fraction of the step: the
  consumer sleeps the step's time between batches, as the device would compute;
- the loader's anonymous resident memory (RssAnon, not RSS, which counts the mapped shard
  pages) after an epoch over 1x and over 10x the corpus.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = sysconfig.get_paths()["stdlib"] + "/*.py"
BUCKET = "bench-tokens"


def rss_anon_mb() -> float:
    """Anonymous resident memory of this process (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _corpus_bytes(pattern: str) -> int:
    import glob

    return sum(os.path.getsize(p) for p in glob.glob(pattern))


def tokenizer_throughput(work: Path, bpe_vocab: int) -> dict:
    """MB/s of text for the bytes tokenizer and a BPE (trained first, timed apart)."""
    from trainer.data.tokens.tokenize_corpus import find_documents, tokenize
    from trainer.data.tokens.tokenizer import train_bpe

    megabytes = _corpus_bytes(CORPUS) / 1e6
    started = time.perf_counter()
    tokenize(CORPUS, str(work / "bytes"), shard_bytes=1 << 20)
    bytes_seconds = time.perf_counter() - started
    started = time.perf_counter()
    texts = (path.read_text(errors="replace") for _, path, _ in find_documents(CORPUS, None))
    tokenizer_json = train_bpe(texts, bpe_vocab, work / "bpe-tokenizer" / "tokenizer.json")
    train_seconds = time.perf_counter() - started
    started = time.perf_counter()
    tokenize(CORPUS, str(work / "bpe"), tokenizer=str(tokenizer_json), shard_bytes=1 << 20)
    bpe_seconds = time.perf_counter() - started
    return {"corpus_mb": round(megabytes, 2), "bytes_mb_per_s": round(megabytes / bytes_seconds, 2),
            "bpe_mb_per_s": round(megabytes / bpe_seconds, 2), "bpe_vocab": bpe_vocab,
            "bpe_train_s": round(train_seconds, 2), "workers": os.cpu_count()}


def read_epoch(path: str, seq_len: int, global_batch_size: int, step_ms: float, batches: int) -> dict:
    """Read `batches` global batches (0: the whole epoch) as a step of `step_ms` would consume them."""
    from trainer.data.tokens.token_shards import TokenShards

    # The local emulator is a single-threaded server with a listen backlog of 5: more requests
    # in flight only queue there (Cloud Storage serves the engine's default of 16 at once).
    shards = TokenShards(path, seq_len=seq_len, global_batch_size=global_batch_size, read_concurrency=4)
    shards.bind(0, 1, 1)
    opened_mb, waits, peak_mb = rss_anon_mb(), [], 0.0
    count = batches or len(shards)
    started = time.perf_counter()
    iterator = shards.epoch(1)
    for _ in range(count):
        asked = time.perf_counter()
        next(iterator)
        waits.append(time.perf_counter() - asked)
        time.sleep(step_ms / 1e3)
        peak_mb = max(peak_mb, rss_anon_mb())
    seconds = time.perf_counter() - started
    iterator.close()
    # Throughput unthrottled: the same reads with no step in between.
    iterator, started = shards.epoch(2), time.perf_counter()
    for _ in range(count):
        next(iterator)
    raw_seconds = time.perf_counter() - started
    iterator.close()
    first, steady = waits[0], sorted(waits[1:] or waits)  # the first batch waits for the read-ahead to fill
    return {"batches": count, "tokens_per_s": count * seq_len * global_batch_size / raw_seconds,
            "first_wait_ms": first * 1e3, "p99_wait_ms": steady[min(len(steady) - 1, int(0.99 * len(steady)))] * 1e3,
            "median_wait_ms": statistics.median(steady) * 1e3, "throttled_seconds": seconds,
            "rss_anon_open_mb": opened_mb, "rss_anon_peak_mb": peak_mb}


def _child(args: list[str], env: dict | None = None) -> dict:
    """Run one measurement in a fresh process; its last stdout line is the JSON result."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "tooling.bench.data", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"bench-data {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tenfold(work: Path) -> str:
    """A corpus of 10 copies of the stdlib sources (links, other names: 10x the documents)."""
    import glob

    root = work / "corpus-10x"
    for copy in range(10):
        folder = root / f"copy{copy}"
        folder.mkdir(parents=True, exist_ok=True)
        for source in glob.glob(CORPUS):
            (folder / os.path.basename(source)).symlink_to(source)
    return str(root)


def run_data_bench(seq_len: int, global_batch_size: int, step_ms: float, batches: int, bpe_vocab: int) -> str:
    from tooling.storage_emulator import free_port, start_emulator

    from trainer.data.tokens.tokenize_corpus import tokenize

    work = Path(tempfile.mkdtemp(prefix="bench-data-"))
    tok = _child(["tokenizers", str(work), str(bpe_vocab)])
    shape = [str(seq_len), str(global_batch_size), str(step_ms)]
    local = _child(["read", str(work / "bytes"), *shape, str(batches)])
    tokenize(_tenfold(work), str(work / "bytes-10x"), shard_bytes=1 << 20)  # the 1x shards' size: 10x the shards
    unthrottled = [str(seq_len), str(global_batch_size), "0", "0"]  # a whole epoch, as fast as it reads
    whole_1x = _child(["read", str(work / "bytes"), *unthrottled])
    whole_10x = _child(["read", str(work / "bytes-10x"), *unthrottled])
    port = free_port()
    server = start_emulator(work / "gcs", BUCKET, port)
    gcs_env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "TPU_TRAINER_STAGING_DIR": str(work / "staging")}
    try:
        os.environ.update(gcs_env)
        tokenize(CORPUS, f"gs://{BUCKET}/bytes", shard_bytes=1 << 20)
        remote = _child(["read", f"gs://{BUCKET}/bytes", *shape, str(batches)], gcs_env)
    finally:
        server.terminate()
        server.wait()
    need = seq_len * global_batch_size / (step_ms / 1e3)
    return _markdown(tok, {"local": local, "gs://": remote}, whole_1x, whole_10x, need, seq_len, global_batch_size,
                     step_ms)


def _markdown(tok: dict, reads: dict, whole_1x: dict, whole_10x: dict, need: float, seq_len: int, batch: int,
              step_ms: float) -> str:
    lines = [f"# invoke bench-data ({tok['corpus_mb']} MB corpus, {tok['workers']} cores)", "",
             f"Tokenizer: bytes {tok['bytes_mb_per_s']} MB/s; BPE ({tok['bpe_vocab']} tokens) {tok['bpe_mb_per_s']} MB/s "
             f"(training it: {tok['bpe_train_s']} s).", "",
             f"Loader, global batch {batch} x {seq_len} tokens, a step of {step_ms} ms consuming {need:,.0f} tokens/s "
             "(goals: >= 10x the need, p99 wait < 1% of the step):", "",
             "| shards | tokens/s | x the step's need | first batch wait ms | median wait ms | p99 wait ms | "
             "p99 wait / step |", "|---|---|---|---|---|---|---|"]
    for where, r in reads.items():
        lines.append(f"| {where} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / need:.1f} | {r['first_wait_ms']:.1f} | "
                     f"{r['median_wait_ms']:.3f} | "
                     f"{r['p99_wait_ms']:.3f} | {r['p99_wait_ms'] / step_ms:.2%} |")
    slowest = min(r["tokens_per_s"] for r in reads.values())
    lines += ["", f"The shortest step these reads still feed with a 10x margin: "
              f"{10 * seq_len * batch / slowest * 1e3:.2f} ms.", "", "Loader memory over a whole epoch (RssAnon; the shards are memory-mapped):", "",
              "| corpus | global batches | RssAnon after opening MB | RssAnon peak MB |", "|---|---|---|---|"]
    for label, r in (("1x", whole_1x), ("10x", whole_10x)):
        lines.append(f"| {label} | {r['batches']} | {r['rss_anon_open_mb']:.1f} | {r['rss_anon_peak_mb']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Child entry points: `tokenizers WORK VOCAB` and `read PATH SEQ_LEN BATCH STEP_MS BATCHES`."""
    if argv[0] == "tokenizers":
        print(json.dumps(tokenizer_throughput(Path(argv[1]), int(argv[2]))))
    else:
        path, seq_len, batch, step_ms, batches = argv[1], int(argv[2]), int(argv[3]), float(argv[4]), int(argv[5])
        print(json.dumps(read_epoch(path, seq_len, batch, step_ms, batches)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
