"""Trainer.validate / test / predict on one XLA device: the numbers equal a hand computation
on the host (negative control: other weights), predictions come back in order without the
padding rows, ckpt_path loads a fit's checkpoint, and what cannot run is refused by name.

    .venv/bin/python -m pytest tests/test_evaluate.py     # about half a minute
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer, TrainModule
from trainer.errors import UserError

ROWS, FEATURES = 70, 6  # batches of 16: the last one has 6 real rows and 10 padding rows


def _data(seed: int = 1) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, FEATURES, generator=g)
    return TensorDataset(x, (x.sum(dim=1) > 0).long())


class Classifier(TrainModule):
    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 2))
        self.calls: list[str] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y, reduction="none")

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        return {"loss": F.cross_entropy(logits, y, reduction="none"), "accuracy": (logits.argmax(1) == y).float()}

    def test_step(self, batch, batch_idx):
        return self.validation_step(batch, batch_idx)

    def predict_step(self, batch, batch_idx):
        x, _ = batch
        return self.net(x).softmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def test_dataloader(self):
        return DataLoader(_data(), batch_size=16)

    def setup(self, stage):
        self.calls.append(f"setup:{stage}")

    def on_test_start(self):
        self.calls.append("on_test_start")

    def on_test_end(self):
        self.calls.append("on_test_end")

    def teardown(self, stage):
        self.calls.append(f"teardown:{stage}")


def _by_hand(module: Classifier) -> dict:
    net = copy.deepcopy(module.net).to("cpu")
    x, y = _data().tensors
    with torch.no_grad():
        logits = net(x)
    return {"loss": F.cross_entropy(logits, y).item(), "accuracy": (logits.argmax(1) == y).float().mean().item(),
            "probs": logits.softmax(dim=1)}


def test_validate_and_test_equal_a_hand_computation_over_the_real_rows(xla_device, tmp_path):
    module = Classifier()
    expected = _by_hand(module)
    trainer = Trainer(devices=1, run_dir=str(tmp_path / "run"), progress_bar=False)
    [validated] = trainer.validate(module, DataLoader(_data(), batch_size=16))
    assert validated["val_loss"] == pytest.approx(expected["loss"], rel=1e-5)
    assert validated["val_accuracy"] == pytest.approx(expected["accuracy"], rel=1e-6)
    [tested] = trainer.test(module)  # the module's own test_dataloader, after setup("test")
    assert tested["test_loss"] == pytest.approx(expected["loss"], rel=1e-5)
    assert module.calls == ["setup:validate", "teardown:validate", "setup:test", "on_test_start", "on_test_end",
                            "teardown:test"]
    other = _by_hand(Classifier(seed=1))  # negative control: other weights give another loss
    assert abs(other["loss"] - validated["val_loss"]) > 1e-3


class LogsOnly(Classifier):
    def validation_step(self, batch, batch_idx):  # as most Lightning code: log, return nothing
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y, reduction="none").mean())


def test_a_validation_step_that_only_logs_returns_the_logged_mean(xla_device, tmp_path):
    module = LogsOnly()
    expected = _by_hand(module)["loss"]
    # batches of 14 divide the 70 rows: a logged batch mean has no padding rows to average over
    [validated] = Trainer(devices=1, progress_bar=False).validate(module, DataLoader(_data(), batch_size=14))
    assert validated == {"val_loss": pytest.approx(expected, rel=1e-5)}


def test_predict_returns_each_batch_in_order_without_the_padding(xla_device, tmp_path):
    module = Classifier()
    expected = _by_hand(module)["probs"]
    predictions = Trainer(devices=1, run_dir=str(tmp_path / "run"), progress_bar=False).predict(
        module, DataLoader(_data(), batch_size=16))
    assert [p.shape[0] for p in predictions] == [16, 16, 16, 16, 6]
    assert all(p.device.type == "cpu" for p in predictions)
    torch.testing.assert_close(torch.cat(predictions), expected, rtol=1e-5, atol=1e-6)


def test_ckpt_path_last_and_a_file_load_the_fits_weights(xla_device, tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(devices=1, max_epochs=2, run_dir=str(run), progress_bar=False)
    trainer.fit(Classifier(), DataLoader(_data(), batch_size=16, shuffle=True,
                                         generator=torch.Generator().manual_seed(0)))
    fitted = torch.load(run / "checkpoints" / "final.ckpt", weights_only=False)["module"]
    reference = Classifier()
    reference.load_state_dict(fitted)
    expected = _by_hand(reference)["loss"]
    fresh = Classifier()  # untrained weights: only the checkpoint can give the fitted loss
    assert abs(_by_hand(fresh)["loss"] - expected) > 1e-3
    [last] = trainer.validate(fresh, DataLoader(_data(), batch_size=16), ckpt_path="last")
    assert last["val_loss"] == pytest.approx(expected, rel=1e-5)
    [from_file] = Trainer(devices=1, progress_bar=False).validate(
        Classifier(), DataLoader(_data(), batch_size=16), ckpt_path=str(run / "checkpoints" / "final.ckpt"))
    assert from_file["val_loss"] == pytest.approx(expected, rel=1e-5)


def test_what_cannot_run_is_refused_with_the_fix(xla_device, tmp_path):
    class NoTest(TrainModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(FEATURES, 2)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = Trainer(devices=1, progress_bar=False)
    with pytest.raises(UserError, match=r"needs NoTest\.test_step\(batch, batch_idx\)"):
        trainer.test(NoTest(), DataLoader(_data(), batch_size=16))
    with pytest.raises(UserError, match=r"has no data: pass dataloaders=\.\.\."):
        trainer.validate(Classifier())
    with pytest.raises(UserError, match=r"ckpt_path='last'.*has not run fit, and no run_dir is set"):
        trainer.validate(Classifier(), DataLoader(_data(), batch_size=16), ckpt_path="last")
