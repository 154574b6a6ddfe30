"""The byte-level LM example: its data split, windows, bigram baseline, model and a short run.

`pytest tests/test_bytelm.py` (half a minute, plus the job itself: about 6 minutes on 2
cores, marked slow; CI runs it). The job's loss bar is checked through the real CLI with
the job YAML as documented, against a bigram baseline this test computes itself.
"""
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainer.examples import bytelm_data
from trainer.examples.bytelm import ByteLM
from trainer.examples.bytelm_data import (
    TrainWindows, ValWindows, bigram_baseline, bigram_cross_entropy, is_validation_file, load_corpus, stdlib_files,
)

TINY = dict(context=32, d_model=32, n_layer=1, n_head=2, batch_size=16, train_windows=512, val_windows=64,
            epochs=3, warmup_steps=4, lr=1e-2)


def test_split_is_by_file_disjoint_complete_and_deterministic():
    corpus = load_corpus()
    load_corpus.cache_clear()
    again = load_corpus()
    assert again is not corpus  # really re-read from disk
    assert again.train_files == corpus.train_files and again.val_files == corpus.val_files
    assert np.array_equal(again.train, corpus.train) and np.array_equal(again.val, corpus.val)
    assert not set(corpus.train_files) & set(corpus.val_files)
    assert set(corpus.train_files) | set(corpus.val_files) == {p.name for p in stdlib_files()}
    assert all(is_validation_file(n) for n in corpus.val_files)
    assert not any(is_validation_file(n) for n in corpus.train_files)
    assert 0.03 < len(corpus.val) / (len(corpus.train) + len(corpus.val)) < 0.3  # a real held-out share
    # Each stream is exactly its files' bytes in name order: no file is cut or shared.
    root = stdlib_files()[0].parent
    assert corpus.val.tobytes() == b"".join((root / n).read_bytes() for n in corpus.val_files)


def test_the_split_rule_depends_only_on_the_file_name(tmp_path):
    names = [f"mod{i}.py" for i in range(40)]
    for name in names:
        (tmp_path / name).write_bytes(name.encode() * 3)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nested.py").write_bytes(b"not top level")
    full = load_corpus(str(tmp_path))
    (tmp_path / "mod0.py").unlink()  # another Python version drops a file: nothing else moves
    load_corpus.cache_clear()  # the corpus is cached per root for the process
    fewer = load_corpus(str(tmp_path))
    assert set(fewer.val_files) == set(full.val_files) - {"mod0.py"}
    assert set(fewer.train_files) == set(full.train_files) - {"mod0.py"}
    assert full.val_files and full.train_files and "nested.py" not in full.train_files + full.val_files


def test_windows_have_fixed_shapes_and_shifted_targets_in_every_epoch():
    stream = np.arange(1000, dtype=np.int64).astype(np.uint8)
    train = TrainWindows(stream, context=16, count=20)
    for epoch in (1, 2, 3, 7):
        train.set_epoch(epoch)
        for i in (0, 1, len(train) - 1):
            x, y = train[i]
            assert x.shape == y.shape == (16,) and x.dtype == torch.int64
            assert torch.equal(x[1:], y[:-1])  # the target is the next byte
    train.set_epoch(1)
    first = train[3][0].clone()
    train.set_epoch(2)
    assert not torch.equal(train[3][0], first)  # a new epoch reads other bytes
    train.set_epoch(1)
    assert torch.equal(train[3][0], first)  # ...and the same epoch the same bytes (exact resume)

    val = ValWindows(stream, context=16, count=10)
    assert val.stride >= 17  # window i is stream[i * stride : i * stride + 17]: non-overlapping
    for i in range(len(val)):
        x, y = val[i]
        assert np.array_equal(torch.cat([x[:1], y]).numpy(), stream[i * val.stride : i * val.stride + 17])
    prev, target = val.pairs()
    assert np.array_equal(prev, np.concatenate([val[i][0].numpy() for i in range(10)]))
    assert np.array_equal(target, np.concatenate([val[i][1].numpy() for i in range(10)]))
    with pytest.raises(ValueError, match="do not fit"):
        ValWindows(stream, context=16, count=100)


def test_bigram_matches_an_independent_count():
    train = np.frombuffer(b"ab" * 50 + b"c", dtype=np.uint8)  # a->b 50, b->a 49, b->c 1
    prev = np.frombuffer(b"abbc", dtype=np.uint8)
    target = np.frombuffer(b"bacz", dtype=np.uint8)  # c has no successors: uniform 1/256
    k = 0.5
    expected = -np.mean([
        math.log((50 + k) / (50 + 256 * k)),
        math.log((49 + k) / (50 + 256 * k)),
        math.log((1 + k) / (50 + 256 * k)),
        math.log(1 / 256),
    ])
    assert bigram_cross_entropy(train, prev, target, k) == pytest.approx(expected, rel=1e-12)

    # And a plain Python count on random bytes, for every k the baseline tries.
    rng = np.random.default_rng(0)
    train = rng.integers(0, 8, 3000).astype(np.uint8)
    prev, target = rng.integers(0, 10, 200).astype(np.uint8), rng.integers(0, 10, 200).astype(np.uint8)
    pairs, firsts = {}, {}
    for a, b in zip(train[:-1].tolist(), train[1:].tolist()):
        pairs[a, b] = pairs.get((a, b), 0) + 1
        firsts[a] = firsts.get(a, 0) + 1
    for k in bytelm_data.BIGRAM_KS:
        slow = -sum(math.log((pairs.get((a, b), 0) + k) / (firsts.get(a, 0) + 256 * k))
                    for a, b in zip(prev.tolist(), target.tolist())) / len(prev)
        assert bigram_cross_entropy(train, prev, target, k) == pytest.approx(slow, rel=1e-10)


def test_baseline_reports_the_best_k_on_the_validation_targets():
    corpus = load_corpus()
    val = ValWindows(corpus.val, context=64, count=256)
    base = bigram_baseline(corpus.train, val)
    prev, target = val.pairs()
    losses = [bigram_cross_entropy(corpus.train, prev, target, k) for k in bytelm_data.BIGRAM_KS]
    assert base["nats_per_byte"] == pytest.approx(min(losses))
    assert base["bits_per_byte"] == pytest.approx(base["nats_per_byte"] / math.log(2))
    assert 1.0 < base["nats_per_byte"] < math.log(256)  # better than uniform, far from perfect


def test_lm_head_is_tied_to_the_embedding_and_decay_skips_it():
    model = ByteLM(**TINY)
    assert model.lm_head.weight is model.tok_emb.weight
    assert model.lm_head.weight.data_ptr() == model.tok_emb.weight.data_ptr()
    config = model.configure_optimizers()
    decay, rest = config["optimizer"].param_groups
    assert decay["weight_decay"] > 0 and rest["weight_decay"] == 0
    assert all(p.dim() == 2 for p in decay["params"])
    assert not any(p is model.tok_emb.weight or p is model.pos_emb for p in decay["params"])
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))  # tie counted once


def test_schedule_warms_up_from_zero_per_step_then_decays_to_zero():
    model = ByteLM(**TINY)
    config = model.configure_optimizers()
    assert config["lr_scheduler"]["interval"] == "step"
    total = model.total_steps()
    assert total == 3 * math.ceil(512 / 16)
    factors = [model.lr_factor(s) for s in range(total + 1)]
    assert factors[0] == 0.0 and factors[4] == 1.0 and factors[total] == pytest.approx(0.0, abs=1e-12)
    assert factors[:5] == sorted(factors[:5]) and factors[4:] == sorted(factors[4:], reverse=True)
    assert ByteLM(**{**TINY, "accumulate_grad_batches": 4}).total_steps() == 3 * 8


def test_losses_are_per_sample_sequence_means():
    torch.manual_seed(0)
    model = ByteLM(**TINY)
    x = torch.randint(0, 256, (4, 32))
    y = torch.randint(0, 256, (4, 32))
    loss = model.training_step((x, y), 0)
    assert loss.shape == (4,)
    logits = model(x)
    assert loss[2].item() == pytest.approx(F.cross_entropy(logits[2], y[2]).item(), rel=1e-5)
    out = model.validation_step((x, y), 0)
    assert torch.allclose(out["bits_per_byte"], out["loss"] / math.log(2))


def test_a_short_run_through_the_engine_lowers_the_validation_loss(xla_device, tmp_path):
    from trainer import Trainer

    torch.manual_seed(0)
    # No warm-up, so the run trains from step 1 whether the engine steps the schedule per
    # step or (as the engine once did) per epoch, which would hold a warm-up at lr 0 for epoch 1.
    module = ByteLM(**{**TINY, "warmup_steps": 0})
    trainer = Trainer(devices=1, env_profile="cpu", progress_bar=False, run_dir=str(tmp_path / "run"),
                      max_epochs=TINY["epochs"])
    result = trainer.fit(module)
    losses = [row["val_loss"] for row in result.history]
    assert losses[-1] < losses[0] < math.log(256)  # learnt something, and kept learning
    assert module.lm_head.weight is module.tok_emb.weight  # still tied after the move and training
    assert module.baseline is not None and module.baseline["nats_per_byte"] > 0  # printed at fit start
    assert result.compiles_per_epoch[-1] == 0


def test_the_job_yaml_ties_the_schedule_to_the_trainer():
    from trainer.cli import instantiate_module
    from trainer.config import load_job_config

    job = load_job_config(str(Path(__file__).parent.parent / "trainer/examples/bytelm.yaml"))
    assert job.module_args["epochs"] == job.trainer.max_epochs  # one number, via a YAML alias
    assert job.module_args["train_windows"] % job.module_args["batch_size"] == 0  # no ragged batch
    assert job.module_args["batch_size"] % 8 == 0  # splits evenly over 8 SPMD devices
    module = instantiate_module(job.module, job.module_args)
    assert module.total_steps() == job.trainer.max_epochs * job.module_args["train_windows"] // job.module_args["batch_size"]


@pytest.mark.slow
def test_the_language_model_job_ends_30_percent_below_the_bigram(tmp_path):
    from conftest import run_cli
    from trainer.config import load_job_config

    job = load_job_config(str(Path(__file__).parent.parent / "trainer/examples/bytelm.yaml"))
    corpus = load_corpus()
    bar = 0.7 * bigram_baseline(corpus.train, ValWindows(corpus.val, job.module_args["context"],
                                                          job.module_args["val_windows"]))["nats_per_byte"]
    run = run_cli("train", "--config", "trainer/examples/bytelm.yaml", "--precision", "bf16", "--no-progress",
                  run_dir=tmp_path / "lm", timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.summary["val_loss"] <= bar, (run.summary["val_loss"], bar)
    assert run.summary["compiles_after_first_epoch"] == 0
    assert "bigram baseline" in run.stderr  # the job prints the bar it must beat
