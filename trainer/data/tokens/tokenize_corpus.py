"""`tpu-trainer tokenize`: a text corpus into token shards, on every core, resumable.

    tpu-trainer tokenize --input DIR_OR_GLOB --out DIR|gs://BUCKET/PATH
                         [--tokenizer bytes|tokenizer.json | --train-bpe VOCAB] [--jsonl-field NAME]

A document is a file (or, with --jsonl-field, one JSON line's field). Documents are sorted
by name and cut into shards by input size, so the same corpus always gives the same shards.
Each shard is tokenized by one worker process and written whole (`shard_format`); a re-run
after an interruption skips the shards that are done and verify. A gs:// output is written
to a local staging directory first, then uploaded, the index last.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm.auto import tqdm

from trainer.data.tokens import shard_format
from trainer.data.tokens.tokenizer import BYTES, Tokenizer, train_bpe
from trainer.errors import UserError
from trainer.outputs.atomic_files import TMP_PREFIX

_worker_tokenizer: Tokenizer | None = None


def find_documents(source: str, jsonl_field: str | None) -> list[tuple[str, Path, int | None]]:
    """(name, file, JSON line number or None) for every document, sorted by name."""
    root = Path(source)
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file())
        named = [(str(p.relative_to(root)), p) for p in files]
    else:
        named = [(p, Path(p)) for p in sorted(glob.glob(source, recursive=True)) if Path(p).is_file()]
    if not named:
        raise UserError(f"--input {source}: no files found. Fix: pass a directory or a glob such as 'texts/**/*.txt'.")
    if jsonl_field is None:
        return [(name, path, None) for name, path in named]
    docs = []
    for name, path in named:
        with open(path, encoding="utf-8", errors="replace") as f:
            docs += [(f"{name}:{i}", path, i) for i, line in enumerate(f) if line.strip()]
    return docs


def _text(path: Path, line: int | None, field: str | None) -> str:
    if line is None:
        return path.read_text(encoding="utf-8", errors="replace")
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, text in enumerate(f):
            if i == line:
                value = json.loads(text).get(field)
                if not isinstance(value, str):
                    raise UserError(f"{path} line {i + 1} has no string field {field!r}. Fix: --jsonl-field NAME.")
                return value
    return ""


def plan_shards(docs: list, shard_bytes: int) -> list[list]:
    """Documents cut into consecutive groups of about `shard_bytes` of input each."""
    shards, current, size = [], [], 0
    for doc in docs:
        current.append(doc)
        size += doc[1].stat().st_size if doc[2] is None else 256
        if size >= shard_bytes:
            shards.append(current)
            current, size = [], 0
    return shards + ([current] if current else [])


def _init_worker(source: str) -> None:
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer(source)


def _tokenize_shard(directory: str, number: int, docs: list, field: str | None, dtype: str) -> dict:
    tok = _worker_tokenizer
    encoded = [(name, tok.encode(_text(path, line, field))) for name, path, line in docs]
    return shard_format.write_shard(Path(directory), number, encoded, tok.spec.eot_id, dtype)


def tokenize(source: str, out: str, tokenizer: str = BYTES, train_vocab: int = 0, jsonl_field: str | None = None,
             shard_bytes: int = 64 << 20, workers: int = 0) -> Path:
    """Tokenize `source` into shards at `out`; returns the local directory written (the staging copy for gs://)."""
    from trainer.storage.location import is_remote

    local = _staging(out) if is_remote(out) else Path(out)
    local.mkdir(parents=True, exist_ok=True)
    for stale in local.glob(TMP_PREFIX + "*"):  # a killed run's temporaries, never under a shard's name
        stale.unlink()
    docs = find_documents(source, jsonl_field)
    if train_vocab:
        tokenizer = str(train_bpe((_text(p, i, jsonl_field) for _, p, i in docs), train_vocab, local / "tokenizer.json"))
    elif tokenizer != BYTES:
        shutil.copyfile(tokenizer, local / "tokenizer.json")
    spec = Tokenizer(tokenizer).spec
    dtype = shard_format.dtype_for(spec.vocab_size)
    plan = plan_shards(docs, shard_bytes)
    entries: dict[int, dict] = {n: e for n in range(len(plan)) if (e := shard_format.finished_shard(local, n))}
    todo = [n for n in range(len(plan)) if n not in entries]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count(), initializer=_init_worker,
                             initargs=(tokenizer,)) as pool, \
            tqdm(total=len(plan), initial=len(entries), desc="tokenize", unit="shard") as bar:
        futures = {n: pool.submit(_tokenize_shard, str(local), n, plan[n], jsonl_field, dtype) for n in todo}
        for n, future in futures.items():
            entries[n] = future.result()
            bar.update(1)
    info = {**spec.to_dict(), "file": "tokenizer.json" if spec.kind != BYTES else None}
    shard_format.write_index(local, info, dtype, [entries[n] for n in range(len(plan))])
    if is_remote(out):
        _upload(local, out)
    return local


def _staging(url: str) -> Path:
    from trainer.storage.location import parse_remote

    return parse_remote(url, f"--out {url}").staging


def _upload(local: Path, url: str) -> None:
    """Every file but the index, then the index: a reader never sees an index naming a missing shard."""
    from trainer.storage.bucket import filesystem, md5_base64
    from trainer.storage.location import parse_remote

    remote, fs = parse_remote(url, f"--out {url}"), filesystem()
    files = sorted(p for p in local.iterdir() if p.is_file() and p.name != shard_format.INDEX)
    for path in files + [local / shard_format.INDEX]:
        target = remote.object_path(path.name)
        try:
            if fs.info(target).get("md5Hash") == md5_base64(path):
                continue  # uploaded by an interrupted run
        except FileNotFoundError:
            pass
        fs.put_file(str(path), target)


def report(local: Path, out: str) -> str:
    """One line about what `tokenize` wrote."""
    index = json.loads((local / shard_format.INDEX).read_text())
    tokens = sum(s["tokens"] for s in index["shards"])
    return (f"tokenized: {len(index['shards'])} shard(s), {tokens:,} tokens, vocabulary "
            f"{index['tokenizer']['vocab_size']} -> {out}")
