"""Training from token shards through the real CLI: the loss falls, nothing compiles after
warm-up, and a SIGTERM resume continues bitwise from the step alone (no replay).

    .venv/bin/python -m pytest tests/test_token_training.py     # about two minutes
"""
from __future__ import annotations

import signal
import sysconfig
import time

import pytest
from checkpoint_helpers import finish, run, start, steps, text, wait_for

from trainer.checkpoint.store import CheckpointStore
from trainer.data.tokens.tokenize_corpus import tokenize

MODULE = "tests.helpers_modules:ShardsGPT2"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("shards") / "json"
    tokenize(sysconfig.get_paths()["stdlib"] + "/json/*.py", str(out), shard_bytes=20_000, workers=1)
    return str(out)


def _argv(run_dir, shards: str, *extra: str, epochs: int = 2) -> list[str]:
    import sys

    return [sys.executable, "-m", "trainer", "train", "--module", MODULE, "--max-epochs", str(epochs),
            "--log-every-n-steps", "1", "--no-progress", "--env-profile", "cpu", "--run-dir", str(run_dir),
            "--set", f"data.path={shards}", "--set", "data.seq_len=32", "--set", "data.global_batch_size=16",
            "--set", "data.validation_fraction=0.2", *extra]


def test_shards_train_and_a_sigterm_resume_continues_bitwise(shards, tmp_path):
    ref = tmp_path / "reference"
    assert run(_argv(ref, shards), tmp_path / "ref.log") == 0, text(tmp_path / "ref.log")[-3000:]
    losses = [float(loss) for _, _, loss in steps(ref)]
    assert len(losses) > 20 and sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5  # the loss falls
    import json

    summary = json.loads((ref / "summary.json").read_text())
    assert summary["compiles_after_first_epoch"] == 0 and "val_loss" in summary

    cut = tmp_path / "interrupted"
    proc = start(_argv(cut, shards, "--set", "module_args.step_sleep=0.05"), tmp_path / "cut.log")
    store = CheckpointStore(cut / "checkpoints")
    wait_for(lambda: bool(store.manifest_path.exists() and store.entries()), "epoch 1's checkpoint", proc, timeout=240)
    time.sleep(0.4)  # a few steps into epoch 2
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == 143, text(tmp_path / "cut.log")[-3000:]
    position = store.entries()[-1]["position"]
    assert position["epoch"] == 2 and position["batch"] > 0
    assert run(_argv(cut, shards, "--resume", "auto"), tmp_path / "resumed.log") == 0
    assert steps(cut) == steps(ref)  # every logged loss, bitwise


def test_shards_the_model_cannot_take_are_refused_with_the_fix(shards, tmp_path):
    log = tmp_path / "small.log"
    assert run(_argv(tmp_path / "small", shards, "--set", "module_args.vocab_size=200"), log) == 2
    assert "use a vocabulary of 257 tokens but the model's embedding has 200 rows" in text(log)


@pytest.mark.parametrize("job, bpe", [("bytelm_shards.yaml", 0), ("gpt_bpe.yaml", 512)])
def test_the_example_gpt_trains_from_byte_and_bpe_shards(job, bpe, tmp_path):
    """The examples' own YAMLs (bytelm's GPT on bytes, and on a BPE trained offline), shortened."""
    import json
    import sys

    out = tokenize(sysconfig.get_paths()["stdlib"] + "/json/*.py", str(tmp_path / "tokens"), train_vocab=bpe,
                   shard_bytes=20_000, workers=1)
    vocab = json.loads((out / "index.json").read_text())["tokenizer"]["vocab_size"]
    assert vocab == (bpe or 257)
    log, run_dir = tmp_path / "train.log", tmp_path / "run"
    argv = [sys.executable, "-m", "trainer", "train", "--config", f"trainer/examples/{job}", "--set",
            f"data.path={out}", "--set", f"module_args.vocab_size={vocab}", "--set", "data.validation_fraction=0.2",
            "--set", "data.global_batch_size=8", "--set", "module_args.warmup_steps=5", "--max-epochs", "2",
            "--log-every-n-steps", "1", "--no-progress", "--env-profile", "cpu", "--run-dir", str(run_dir)]
    assert run(argv, log) == 0, text(log)[-3000:]
    losses = [float(loss) for _, _, loss in steps(run_dir)]
    assert len(losses) > 20 and sum(losses[-5:]) / 5 < 0.9 * sum(losses[:5]) / 5, losses  # the loss falls
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["compiles_after_first_epoch"] == 0 and "val_bits_per_token" in summary, summary
