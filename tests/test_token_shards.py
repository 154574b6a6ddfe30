"""Token shards as training data: one global order, per-host reads, resume from the step alone.

    .venv/bin/python -m pytest tests/test_token_shards.py     # a few seconds, no XLA

Hosts are simulated by binding the same shards as host h of H (PJRT on CPU is one process).
"""
from __future__ import annotations

import sysconfig

import numpy as np
import pytest
import torch

from trainer.data.tokens.permutation import Permutation, epoch_seed
from trainer.data.tokens.token_shards import IGNORE, TokenShards, in_validation
from trainer.data.tokens.tokenize_corpus import tokenize
from trainer.errors import UserError

G, S = 8, 32


@pytest.fixture(scope="module")
def shards_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokens") / "json-bytes"
    tokenize(sysconfig.get_paths()["stdlib"] + "/json/*.py", str(out), shard_bytes=20_000, workers=2)
    return str(out)


def _hosts(path, hosts: int, **kw) -> list[TokenShards]:
    out = []
    for h in range(hosts):
        shards = TokenShards(path, seq_len=S, global_batch_size=G, **kw)
        shards.bind(h, hosts, data_parallel_size=hosts * 2)
        out.append(shards)
    return out


def _epoch(shards: TokenShards, epoch: int, start: int = 0) -> list[torch.Tensor]:
    return [b["input_ids"] for b in shards.epoch(epoch, start)]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 97, 1000, 4099])
def test_the_permutation_is_a_seeded_bijection(n):
    a = Permutation(n, 7)[np.arange(n)]
    assert sorted(a.tolist()) == list(range(n))
    assert (Permutation(n, 7)[np.arange(n)] == a).all()  # deterministic
    if n > 3:
        assert (Permutation(n, 8)[np.arange(n)] != a).any()  # another seed, another order


@pytest.mark.parametrize("hosts", [2, 4])
def test_the_hosts_batches_at_step_k_are_the_single_hosts_batch_k(shards_dir, hosts):
    single = _epoch(_hosts(shards_dir, 1)[0], 1)
    per_host = [_epoch(s, 1) for s in _hosts(shards_dir, hosts)]
    assert all(len(batches) == len(single) for batches in per_host)
    for k, whole in enumerate(single):
        assert torch.equal(torch.cat([batches[k] for batches in per_host]), whole)


def test_every_sequence_of_an_epoch_is_read_exactly_once(shards_dir):
    shards = _hosts(shards_dir, 1)[0]
    used = len(shards) * G
    order = Permutation(shards.sequences, epoch_seed(0, 1))[np.arange(used)]
    assert len(set(order.tolist())) == used  # the indices the epoch reads are distinct
    rows = torch.cat(_epoch(shards, 1))
    expected = torch.stack([torch.from_numpy(shards._sequence(int(i))) for i in order])
    assert torch.equal(rows, expected)


def test_each_epoch_has_its_own_order_of_the_same_sequences(shards_dir):
    shards = _hosts(shards_dir, 1)[0]
    one, two = torch.cat(_epoch(shards, 1)), torch.cat(_epoch(shards, 2))
    assert not torch.equal(one, two)
    full = torch.stack([torch.from_numpy(shards._sequence(i)) for i in range(shards.sequences)])
    as_set = {tuple(r.tolist()) for r in full}
    assert {tuple(r.tolist()) for r in one} <= as_set and {tuple(r.tolist()) for r in two} <= as_set


def test_a_resume_at_step_k_continues_the_same_batches_on_any_host_count(shards_dir):
    whole = _epoch(_hosts(shards_dir, 1)[0], 3)
    k = 5
    assert [torch.equal(a, b) for a, b in zip(_epoch(_hosts(shards_dir, 1)[0], 3, start=k), whole[k:])] == \
        [True] * (len(whole) - k)
    resumed_on_two = [_epoch(s, 3, start=k) for s in _hosts(shards_dir, 2)]
    for i, expected in enumerate(whole[k:]):
        assert torch.equal(torch.cat([host[i] for host in resumed_on_two]), expected)


def test_labels_are_the_inputs_and_unpacked_sequences_start_documents(shards_dir, tmp_path):
    batch = next(iter(_hosts(shards_dir, 1)[0].epoch(1)))
    assert torch.equal(batch["labels"], batch["input_ids"]) and batch["input_ids"].shape == (G, S)
    corpus = tmp_path / "docs"
    corpus.mkdir()
    texts = {f"doc{i:02d}.txt": chr(65 + i) * (3 + 5 * i) for i in range(8)}  # 3 .. 38 bytes
    for name, text in texts.items():
        (corpus / name).write_text(text)
    tokenize(str(corpus), str(tmp_path / "out"), workers=1)
    unpacked = TokenShards(str(tmp_path / "out"), seq_len=16, global_batch_size=4, packing=False,
                           validation_fraction=0)
    unpacked.bind(0, 1, 1)
    rows = torch.cat([b["input_ids"] for b in unpacked.epoch(1)])
    labels = torch.cat([b["labels"] for b in unpacked.epoch(1)])
    starts = {row[0].item() for row in rows}
    assert starts <= {ord(t[0]) for t in texts.values()} and len(starts) == 8  # each row starts a document
    for row, label in zip(rows, labels):
        n = len(next(t for t in texts.values() if ord(t[0]) == row[0].item()))
        if n + 1 < 16:  # the document, its end-of-text, then padding labelled -100
            assert row[n].item() == unpacked.eot_id and (label[n + 1:] == IGNORE).all() and (label[:n + 1] >= 0).all()
        else:
            assert (label >= 0).all()  # a long document fills the sequence


def test_the_validation_split_is_disjoint_and_stable(shards_dir):
    names = [d[0] for s in TokenShards(shards_dir, S, G).reader.index["shards"] for d in s["documents"]]
    held = [n for n in names if in_validation(n, 0.3)]
    assert held and len(held) < len(names) and held == [n for n in names if in_validation(n, 0.3)]
    train = TokenShards(shards_dir, S, G, validation_fraction=0.3)
    val = TokenShards(shards_dir, S, G, split="validation", validation_fraction=0.3)
    assert train.sequences + val.sequences <= TokenShards(shards_dir, S, G, validation_fraction=0).sequences
    assert {tuple(x) for x in train._spans.tolist()}.isdisjoint({tuple(x) for x in val._spans.tolist()})


def test_a_global_batch_the_mesh_cannot_split_names_the_sizes_that_work(shards_dir):
    shards = TokenShards(shards_dir, S, global_batch_size=12)
    with pytest.raises(UserError, match=r"global_batch_size=12 cannot be split evenly over 2 host\(s\) and 8 .*"
                                        r"multiple of 8\. Fix: use global_batch_size=8 or 16"):
        shards.bind(0, 2, 8)


def test_a_model_too_small_for_the_shards_is_refused(shards_dir):
    shards = TokenShards(shards_dir, seq_len=S, global_batch_size=G)
    with pytest.raises(UserError, match="vocabulary of 257 tokens but the model's embedding has 256 rows"):
        shards.check_model(256, 1024)
    with pytest.raises(UserError, match="seq_len=32 is longer than the model's 16 positions"):
        shards.check_model(257, 16)
    shards.check_model(257, 32)  # fits
