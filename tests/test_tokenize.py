"""`tpu-trainer tokenize`: bytes and BPE shards of the stdlib's sources, interrupted and resumed,
and damaged shards refused by name.

    .venv/bin/python -m pytest tests/test_tokenize.py     # about half a minute, no XLA
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from trainer.data.tokens.shard_format import INDEX
from trainer.data.tokens.token_shards import TokenShards
from trainer.errors import UserError

REPO = Path(__file__).resolve().parent.parent
CORPUS = sysconfig.get_paths()["stdlib"] + "/*.py"


def _tokenize(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer", "tokenize", "--input", CORPUS, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if not p.name.startswith(".tmp-")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "bytes"
    proc = _tokenize("--out", str(out), "--shard-megabytes", "0.2", "--workers", "2")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert "tokenized:" in stdout and "vocabulary 257" in stdout
    return out


def test_bytes_shards_hold_the_corpus_with_end_of_text_between_documents(reference):
    index = json.loads((reference / INDEX).read_text())
    assert index["dtype"] == "uint16" and index["tokenizer"] == {"kind": "bytes", "vocab_size": 257,
                                                                 "eot_id": 256, "file": None}
    files = sorted(Path(CORPUS).parent.glob("*.py"))
    assert sum(len(s["documents"]) for s in index["shards"]) == len(files)
    shards = TokenShards(str(reference), seq_len=64, global_batch_size=8, validation_fraction=0)
    name, offset, tokens = index["shards"][0]["documents"][0]
    first = shards.reader.read(0, offset, tokens + 1)
    assert bytes(first[:-1].tolist()) == (Path(CORPUS).parent / Path(name).name).read_bytes() and first[-1] == 256


def test_a_killed_tokenizer_leaves_no_half_shard_and_a_rerun_gives_the_same_files(reference, tmp_path):
    out = tmp_path / "killed"
    proc = _tokenize("--out", str(out), "--shard-megabytes", "0.2", "--workers", "1", start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("shard-*.json")) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    done = _files(out)
    expected = _files(reference)
    assert INDEX not in done and 0 < len([n for n in done if n.endswith(".json")]) < len(expected) // 2
    for name, data in done.items():  # every visible shard is whole
        assert data == expected[name], name
    rerun = _tokenize("--out", str(out), "--shard-megabytes", "0.2", "--workers", "2")
    assert rerun.wait(timeout=300) == 0
    assert _files(out) == expected


def test_a_flipped_byte_a_truncated_and_a_missing_shard_are_refused_by_name(reference, tmp_path):
    import shutil

    for damage, message in (("flip", "failed verification"), ("truncate", "but the index recorded"),
                            ("remove", "is missing")):
        copy = tmp_path / damage
        shutil.copytree(reference, copy)
        shard = copy / "shard-00001.bin"
        data = bytearray(shard.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0x01
            shard.write_bytes(bytes(data))
        elif damage == "truncate":
            shard.write_bytes(bytes(data[:-10]))
        else:
            shard.unlink()
        with pytest.raises(UserError, match=f"token shard {shard} .*{message}"):
            TokenShards(str(copy), seq_len=64, global_batch_size=8)
    TokenShards(str(reference), seq_len=64, global_batch_size=8)  # the undamaged original opens


def test_a_bpe_trained_offline_on_the_corpus_tokenizes_it_shorter(reference, tmp_path):
    out = tmp_path / "bpe"
    proc = _tokenize("--out", str(out), "--train-bpe", "2048", "--shard-megabytes", "1")
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-2000:]
    index = json.loads((out / INDEX).read_text())
    assert index["tokenizer"]["kind"] == "bpe" and index["tokenizer"]["vocab_size"] == 2048
    assert (out / "tokenizer.json").exists()
    tokens = sum(s["tokens"] for s in index["shards"])
    raw = sum(s["tokens"] for s in json.loads((reference / INDEX).read_text())["shards"])
    assert tokens < raw / 2  # a BPE of 2048 merges code at least 2x


def test_bad_input_is_one_paragraph_and_exit_code_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainer", "tokenize", "--input", str(tmp_path / "nothing*"),
                           "--out", str(tmp_path / "o")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no files found" in proc.stderr and "Traceback" not in proc.stderr
