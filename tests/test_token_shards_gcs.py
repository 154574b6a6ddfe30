"""Token shards in a bucket: the same batches as local shards, read by byte ranges.

    .venv/bin/python -m pytest tests/test_token_shards_gcs.py     # about half a minute, no XLA

Against a real Cloud Storage JSON API server (gcp-storage-emulator) behind a recording
proxy (tests/storage_server.py).
"""
from __future__ import annotations

import os
import sysconfig

import pytest
import torch
from storage_server import StorageServer

from trainer.data.tokens.tokenize_corpus import tokenize
from trainer.errors import UserError

BUCKET = "tokens-bucket"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    storage = StorageServer(tmp_path_factory.mktemp("gcs-tokens"), BUCKET).start()
    saved = dict(os.environ)
    os.environ.update(storage.env(tmp_path_factory.mktemp("staging")))
    yield storage
    os.environ.clear()
    os.environ.update(saved)
    storage.stop()


def test_shards_in_a_bucket_give_the_local_batches_and_are_read_by_ranges(server, tmp_path):
    from trainer.data.tokens.token_shards import TokenShards

    corpus = sysconfig.get_paths()["stdlib"] + "/json/*.py"
    local = tokenize(corpus, str(tmp_path / "local"), shard_bytes=20_000, workers=1)
    url = f"gs://{BUCKET}/tokens/json"
    tokenize(corpus, url, shard_bytes=20_000, workers=1)
    held = sum(p.stat().st_size for p in local.glob("shard-*.bin"))

    def batches(path: str) -> list[torch.Tensor]:
        shards = TokenShards(path, seq_len=32, global_batch_size=4)
        shards.bind(0, 1, 1)
        out = []
        for batch in shards.epoch(1):
            out.append(batch["input_ids"])
            if len(out) == 3:  # a short run: three steps
                return out
        return out

    expected = batches(str(local))
    before = len(server.served)
    remote = batches(url)
    assert all(torch.equal(a, b) for a, b in zip(remote, expected)) and len(remote) == 3
    shard_reads = [(r, n) for r, n in server.served[before:] if r.method == "GET" and "shard-" in r.object_name]
    assert shard_reads and sum(n for _, n in shard_reads) < held / 4, (sum(n for _, n in shard_reads), held)


def test_a_damaged_shard_in_a_bucket_is_refused_by_name(server, tmp_path):
    from trainer.data.tokens.token_shards import TokenShards

    url = f"gs://{BUCKET}/tokens/damaged"
    tokenize(sysconfig.get_paths()["stdlib"] + "/json/*.py", url, shard_bytes=20_000, workers=1)
    fs = server.filesystem()
    path = f"{BUCKET}/tokens/damaged/shard-00001.bin"
    data = bytearray(fs.cat_file(path))
    data[100] ^= 0x01
    fs.pipe_file(path, bytes(data))
    with pytest.raises(UserError, match="token shard gs://tokens-bucket/tokens/damaged/shard-00001.bin failed"):
        TokenShards(url, seq_len=32, global_batch_size=4)
