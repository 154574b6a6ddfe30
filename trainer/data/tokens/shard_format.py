"""Token shards on disk: flat arrays of token ids, and the index that says what is in them.

    OUT/index.json          {"format", "tokenizer": {kind, vocab_size, eot_id, file}, "dtype",
                             "shards": [{file, tokens, bytes, sha256, md5, documents: [[name, offset, tokens]]}]}
    OUT/shard-00000.bin     uint16 (vocabulary <= 65536) or uint32 token ids, little-endian;
                            each document is followed by the end-of-text id
    OUT/shard-00000.json    the same shard's entry, written when the shard is done (a re-run
                            after an interruption skips every shard that has one and verifies)
    OUT/tokenizer.json      the tokenizer (BPE only)

Every file is written to a temporary name, fsynced and renamed, so a killed tokenizer never
leaves a half-written shard under a shard's name; the index is written last.
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np

from trainer.errors import UserError
from trainer.outputs.atomic_files import write_bytes_atomic, write_json_atomic

INDEX = "index.json"
FORMAT = 1


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def shard_name(number: int) -> str:
    return f"shard-{number:05d}.bin"


def write_shard(directory: Path, number: int, documents: list[tuple[str, list[int]]], eot_id: int,
                dtype: str) -> dict:
    """Write one shard (each document's ids, then end-of-text) and its entry; returns the entry."""
    arrays, entries, offset = [], [], 0
    for name, ids in documents:
        arrays.append(np.asarray(ids + [eot_id], dtype=dtype))
        entries.append([name, offset, len(ids)])
        offset += len(ids) + 1
    data = (np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)).astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    name = shard_name(number)
    write_bytes_atomic(data, directory / name)
    entry = {"file": name, "tokens": offset, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
             "md5": base64.b64encode(hashlib.md5(data).digest()).decode(), "documents": entries}
    write_json_atomic(entry, directory / name.replace(".bin", ".json"))
    return entry


def finished_shard(directory: Path, number: int) -> dict | None:
    """The entry of a shard a previous run finished and that still verifies, else None."""
    side = directory / shard_name(number).replace(".bin", ".json")
    path = directory / shard_name(number)
    if not side.exists() or not path.exists():
        return None
    entry = json.loads(side.read_text())
    data = path.read_bytes()
    return entry if len(data) == entry["bytes"] and hashlib.sha256(data).hexdigest() == entry["sha256"] else None


def write_index(directory: Path, tokenizer: dict, dtype: str, shards: list[dict]) -> None:
    write_json_atomic({"format": FORMAT, "tokenizer": tokenizer, "dtype": dtype, "shards": shards},
                             directory / INDEX)


def parse_index(text: str, where: str) -> dict:
    """The index's content; a UserError naming `where` when it is not one."""
    try:
        index = json.loads(text)
        assert index["format"] == FORMAT and index["dtype"] in ("uint16", "uint32")
        for shard in index["shards"]:
            assert {"file", "tokens", "bytes", "sha256", "documents"} <= set(shard)
        int(index["tokenizer"]["vocab_size"]), int(index["tokenizer"]["eot_id"])
        return index
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise UserError(f"{where} is not a token-shard index ({type(exc).__name__}: {exc}). Fix: point the data "
                        "path at a directory written by `tpu-trainer tokenize`, or tokenize again.") from exc
