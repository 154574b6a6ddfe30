"""The loop features transformer recipes use, through the real library on one PJRT CPU device.

`pytest tests/test_loop_features.py` (about 2 minutes). Accumulation, clipping, per-step
schedules (including rates of exactly 0), max_steps, mid-epoch validation, self.log,
Lightning's return and constructor habits. Each comparison has its negative control.
"""
from __future__ import annotations

import csv
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset

from trainer import Trainer, TrainModule, UserError, seed_everything
from trainer.examples.digits import DigitsClassifier, digits_datasets

ACCUMULATION_TOLERANCE = 1e-4  # fp32: the batch-64 sum and four batch-16 sums add in different orders


def _fit(module, tmp_path, name="run", **options):
    options.setdefault("max_epochs", 1)
    options.setdefault("log_every_n_steps", 1)
    trainer = Trainer(devices=1, run_dir=str(tmp_path / name), progress_bar=False, env_profile="cpu", **options)
    return trainer.fit(module)


def _steps(tmp_path, name="run") -> list[dict]:
    with open(tmp_path / name / "steps.csv", newline="") as f:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(f)]


def _digits(**kwargs):
    seed_everything(0)
    return DigitsClassifier(**kwargs)


def test_accumulating_4_batches_of_16_trains_like_batches_of_64(xla_device, tmp_path):
    big = _fit(_digits(batch_size=64), tmp_path, "b64")
    small = _fit(_digits(batch_size=16), tmp_path, "b16x4", accumulate_grad_batches=4)
    control = _fit(_digits(batch_size=16), tmp_path, "b16x2", accumulate_grad_batches=2)
    b64, b16x4, b16x2 = (_steps(tmp_path, n) for n in ("b64", "b16x4", "b16x2"))
    assert len(b64) == len(b16x4) == 23 and len(b16x2) == 45  # optimizer steps, the last window ragged
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(b64, b16x4)) < ACCUMULATION_TOLERANCE
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(b64, b16x2)) > 100 * ACCUMULATION_TOLERANCE
    assert big.history[0]["train_loss"] == pytest.approx(small.history[0]["train_loss"], abs=ACCUMULATION_TOLERANCE)
    assert small.compiles_per_epoch and control.history[0]["global_step"] == 45


class NormProbe(DigitsClassifier):
    """Logs the gradients' norm as the optimizer sees it (after clipping), every step."""

    def on_before_optimizer_step(self, optimizer):
        norms = [p.grad.norm() for p in self.parameters() if p.grad is not None]
        self.log("norm_after_clip", torch.stack(norms).norm())


def test_clipping_bounds_the_norm_the_optimizer_sees_and_logs_the_norm_before(xla_device, tmp_path):
    _fit(NormProbe(), tmp_path, "clipped", gradient_clip_val=0.05)
    clipped = _steps(tmp_path, "clipped")
    assert all(s["norm_after_clip"] <= 0.05 * 1.001 for s in clipped)
    assert sum(s["grad_norm"] > 0.05 for s in clipped) >= 20  # the limit really bit
    _fit(NormProbe(), tmp_path, "free")  # negative control: no clipping, the same norms go through
    assert max(s["norm_after_clip"] for s in _steps(tmp_path, "free")) > 0.05


class Scheduled(DigitsClassifier):
    """HF's recipe: warm-up from exactly 0, then cosine to exactly 0, stepped per optimizer step."""

    total_steps = 46

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=3e-3)

        def rate(step):
            warmup = 5
            if step < warmup:
                return step / warmup
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / (self.total_steps - warmup))))

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def test_a_per_step_schedule_from_0_to_0_moves_every_step_and_compiles_nothing_after_warm_up(xla_device, tmp_path):
    result = _fit(Scheduled(), tmp_path, max_epochs=3)
    rates = [s["lr"] for s in _steps(tmp_path)]
    assert rates[0] == 0.0 and rates[46] == 0.0 and rates[47] == 0.0  # exactly 0 at both ends, logged as 0
    assert all(a != b for a, b in zip(rates[:46], rates[1:46]))  # a new rate every optimizer step
    assert result.compiles_per_epoch[1:] == [0, 0]


def test_without_the_engine_a_rate_of_exactly_0_compiles_again(xla_device):
    """Negative control: the same schedule in a plain torch_xla loop compiles when it leaves 0."""
    from trainer.runtime import backend

    seed_everything(0)
    module = Scheduled().to(xla_device)
    optimizer = module.configure_optimizers()["optimizer"]
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.0 if step < 3 else 0.5)
    x, y = (t[:64].to(xla_device) for t in digits_datasets()[0].tensors)
    compiles = []
    for _ in range(6):
        before = backend.compile_count()
        F.cross_entropy(module(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        backend.sync()
        compiles.append(backend.compile_count() - before)
    assert sum(compiles[2:]) > 0, compiles  # the step that leaves 0.0 is a new graph


class Logging(DigitsClassifier):
    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        losses = F.cross_entropy(logits, y, reduction="none")
        self.log("train_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)
        self.log_dict({"logit_scale": logits.abs().mean(), "batch_number": float(batch_idx)})
        return {"loss": losses, "logits": logits}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())
        self.log("val_batch_number", float(batch_idx))  # a host number: stays on the host, no new graph
        return {"loss": F.cross_entropy(logits, y, reduction="none")}


def test_self_log_and_a_dict_return_reach_steps_metrics_and_tensorboard_without_host_reads(xla_device, tmp_path):
    result = _fit(Logging(), tmp_path, max_epochs=2, log_every_n_steps=5)
    steps = _steps(tmp_path)
    assert [s["global_step"] for s in steps] == list(range(5, 47, 5))
    assert all({"train_acc", "logit_scale", "batch_number", "lr"} <= set(s) for s in steps)
    epoch = result.history[-1]
    assert 0.5 < epoch["train_acc"] <= 1 and 0.5 < epoch["val_acc"] <= 1 and "val_loss" in epoch
    assert all(row["host_transfers_per_step_outside_logging"] == 0 for row in result.history)
    assert 0 < epoch["val_batch_number"] < 5 and result.compiles_per_epoch[1] == 0
    tb = list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))
    assert tb and b"train/train_acc" in b"".join(p.read_bytes() for p in tb)


class Bad(DigitsClassifier):
    def __init__(self, returns):
        super().__init__()
        self.returns = returns

    def training_step(self, batch, batch_idx):
        return self.returns(super().training_step(batch, batch_idx))


@pytest.mark.parametrize("returns, message", [
    (lambda loss: {"losses": loss}, "training_step returned a dict without a tensor under 'loss' ({'losses': Tensor})"),
    (lambda loss: None, "training_step returned NoneType"),
    (lambda loss: loss.sum().item(), "training_step returned float"),
])
def test_what_training_step_returns_that_the_engine_cannot_use_is_named(xla_device, tmp_path, returns, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")):
        _fit(Bad(returns), tmp_path)


def test_max_steps_stops_mid_epoch_with_a_final_checkpoint_and_resume_continues(xla_device, tmp_path):
    from trainer.checkpoint.store import CheckpointStore

    result = _fit(_digits(), tmp_path, max_epochs=5, max_steps=30)
    assert result.history[-1]["global_step"] == 30 and len(result.history) == 2
    final = CheckpointStore(tmp_path / "run" / "checkpoints").entries()[-1]
    assert final["file"] == "final.ckpt" and final["position"] == {"epoch": 2, "batch": 7}
    resumed = Trainer(devices=1, run_dir=str(tmp_path / "run"), progress_bar=False, env_profile="cpu", max_epochs=5,
                      max_steps=40, resume="auto", log_every_n_steps=1).fit(_digits())
    assert resumed.history[-1]["global_step"] == 40
    assert [int(s["global_step"]) for s in _steps(tmp_path)] == list(range(1, 41))


def test_validation_every_n_steps_lands_in_val_steps_csv(xla_device, tmp_path):
    result = _fit(_digits(), tmp_path, max_epochs=2, val_check_interval=10)
    with open(tmp_path / "run" / "val_steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["global_step"]) for r in rows] == [10, 20, 30, 40]
    assert all(0 < float(r["val_accuracy"]) <= 1 for r in rows)
    assert result.compiles_per_epoch[1] == 0


def test_one_batch_validation_and_any_data_size_compile_nothing_after_epoch_1(xla_device, tmp_path):
    train, val = digits_datasets()
    module = _digits()
    result = Trainer(devices=1, run_dir=str(tmp_path / "run"), progress_bar=False, env_profile="cpu",
                     max_epochs=3).fit(module, DataLoader(Subset(train, range(200)), batch_size=64, shuffle=True,
                                                          generator=torch.Generator().manual_seed(0)),
                                       DataLoader(Subset(val, range(50)), batch_size=64))
    assert result.compiles_per_epoch[1:] == [0, 0]


class ScalarLoss(DigitsClassifier):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx).mean()


def test_a_scalar_loss_warns_only_when_a_batch_was_padded_and_points_at_the_users_code(xla_device, tmp_path):
    train, val = digits_datasets()
    even = DataLoader(Subset(train, range(256)), batch_size=64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(devices=1, run_dir=str(tmp_path / "even"), progress_bar=False, env_profile="cpu",
                max_epochs=1).fit(ScalarLoss(), even, None)
    assert not [w for w in caught if "scalar loss" in str(w.message)]
    with pytest.warns(UserWarning, match="this batch was padded") as record:
        _fit(ScalarLoss(), tmp_path, "ragged")
    assert record[0].filename == __file__


def test_lightning_trainer_spellings(xla_device, tmp_path):
    result = Trainer(accelerator="auto", devices=1, max_steps=3, accumulate_grad_batches=2, gradient_clip_val=1.0,
                     enable_progress_bar=False, default_root_dir=str(tmp_path / "root"), log_every_n_steps=1,
                     every_n_steps=2, keep_last=1, env_profile="cpu").fit(_digits())
    assert result.history[-1]["global_step"] == 3
    assert result.run_dir.parent == tmp_path / "root"
    with pytest.raises(UserError, match=r"Trainer\(callbacks=...\) is a Lightning option that tpu-trainer does not "
                                        r"support: override the TrainModule hooks"):
        Trainer(devices=1, callbacks=[], env_profile="cpu")
    with pytest.raises(UserError, match=r"unknown option 'accumulate_grad_batch'. Did you mean accumulate_grad_batches\?"):
        Trainer(devices=1, accumulate_grad_batch=4, env_profile="cpu")
    with pytest.raises(UserError, match=r"accelerator='gpu' is not supported: tpu-trainer trains on XLA devices"):
        Trainer(accelerator="gpu")
    with pytest.raises(UserError, match=r"profile 'tpu-vm' targets a TPU, but this host has no TPU devices"):
        Trainer(accelerator="tpu", devices=8)


class NoValidation(TrainModule):
    """A plain MLP, no validation loader: the epoch's only host read is the training sums'."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        from torch.utils.data import DataLoader, TensorDataset

        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(512, 32, generator=g), torch.randint(0, 4, (512,), generator=g))
        return DataLoader(data, batch_size=64)


def test_accumulation_compiles_nothing_after_the_first_epoch_even_at_the_first_logging_step(xla_device, tmp_path):
    """4 optimizer steps per epoch, the first logging step (10) falls in epoch 3: the engine up to
    2f5dfe6 compiled [3, 0, 1] here (a graph with the logged loss as an extra output, and its epoch read)."""
    result = _fit(NoValidation(), tmp_path, max_epochs=3, accumulate_grad_batches=2, log_every_n_steps=10)
    assert result.compiles_per_epoch[0] > 0 and result.compiles_per_epoch[1:] == [0, 0]
    assert [int(s["global_step"]) for s in _steps(tmp_path)] == [10]
