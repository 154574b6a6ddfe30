"""Lightning's Trainer arguments with Lightning's meaning, side by side with Lightning's own Trainer
on the CPU (the same module and seed): when validation runs, what is written, and the
arguments that change nothing on XLA (accepted, with the reason logged) or stay unsupported.

    .venv/bin/python -m pytest tests/test_lightning_trainer_args.py     # about a minute
"""
from __future__ import annotations

import logging

import pytest
from helpers_lightning import SplitAtRandom

from trainer import Trainer, UserError


class EpochsValidated(SplitAtRandom):
    """Records the (0-based) epoch of every validation run."""

    def on_validation_start(self):
        self.__dict__.setdefault("validated", []).append(self.current_epoch)


def _lightning_fit(tmp_path, **options):
    import pytorch_lightning as pl

    pl.seed_everything(0)
    module = EpochsValidated()
    trainer = pl.Trainer(accelerator="cpu", devices=1, num_sanity_val_steps=0, enable_progress_bar=False,
                         logger=False, enable_model_summary=False, default_root_dir=str(tmp_path), **options)
    trainer.fit(module)
    return module


def _our_fit(tmp_path, **options):
    import pytorch_lightning as pl

    pl.seed_everything(0)
    module = EpochsValidated()
    Trainer(devices=1, run_dir=str(tmp_path / "run"), progress_bar=False, env_profile="cpu", **options).fit(module)
    return module


@pytest.mark.parametrize("every, epochs", [(2, 5), (3, 3), (1, 2)])
def test_check_val_every_n_epoch_validates_in_the_epochs_lightning_does(xla_device, tmp_path, fresh_seed_env,
                                                                        every, epochs):
    theirs = _lightning_fit(tmp_path / "lightning", max_epochs=epochs, check_val_every_n_epoch=every,
                            enable_checkpointing=False)
    ours = _our_fit(tmp_path / "ours", max_epochs=epochs, check_val_every_n_epoch=every)
    assert ours.validated == theirs.validated, (ours.validated, theirs.validated)
    assert len(ours.validated) == epochs // every  # not every epoch (unless every == 1)


def test_enable_checkpointing_false_writes_no_checkpoint_as_lightning(xla_device, tmp_path, fresh_seed_env):
    _lightning_fit(tmp_path / "lightning", max_epochs=2, enable_checkpointing=False)
    _our_fit(tmp_path / "ours", max_epochs=2, enable_checkpointing=False)
    assert not list((tmp_path / "lightning").rglob("*.ckpt"))
    assert not [p for p in (tmp_path / "ours" / "run").rglob("*") if p.suffix in (".ckpt", ".dcp")]
    _our_fit(tmp_path / "control", max_epochs=2)  # negative control: the default writes final.ckpt
    assert (tmp_path / "control" / "run" / "checkpoints" / "final.ckpt").exists()


def test_arguments_that_change_nothing_on_xla_are_accepted_with_the_reason(xla_device, tmp_path, fresh_seed_env,
                                                                           caplog):
    with caplog.at_level(logging.INFO, logger="trainer.trainer_options"):
        trainer = Trainer(devices=1, deterministic=True, benchmark=True, sync_batchnorm=True, min_epochs=1,
                          num_sanity_val_steps=0, max_epochs=1, run_dir=str(tmp_path / "run"), progress_bar=False)
    said = caplog.text
    assert "Trainer(deterministic=True): nothing changes, an XLA program is deterministic" in said
    assert "Trainer(benchmark=True): nothing changes, cudnn.benchmark has no XLA counterpart" in said
    assert "Trainer(sync_batchnorm=True): nothing changes, one SPMD program sees the whole global batch" in said
    assert "Trainer(min_epochs=1): nothing changes" in said
    assert trainer.config.max_epochs == 1


def test_what_stays_unsupported_is_one_paragraph_naming_the_fix():
    with pytest.raises(UserError, match=r"num_sanity_val_steps=2: tpu-trainer runs no validation batches before "
                                         r"training .* Allowed: 0\. Fix: num_sanity_val_steps=0"):
        Trainer(devices=1, num_sanity_val_steps=2)
    with pytest.raises(UserError, match=r"trainer\.check_val_every_n_epoch"):
        Trainer(devices=1, check_val_every_n_epoch=0)
    with pytest.raises(UserError, match=r"Trainer\(limit_train_batches=\.\.\.\) is a Lightning option that "
                                         r"tpu-trainer does not support"):
        Trainer(devices=1, limit_train_batches=0.1)
