"""The hook contract of our own TrainModule: Lightning's signatures, order and places, self.trainer,
self.log's per-hook defaults and reductions, checkpoint hooks, hyper-parameters, seeds.

`pytest tests/test_hooks.py` (about 2 minutes). One PJRT CPU device in process; the --debug
check runs the real CLI. Each comparison is against a hand computation or a negative control.
"""
from __future__ import annotations

import csv
import json

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch.utils.data import DataLoader, TensorDataset

from conftest import run_cli
from trainer import Trainer, TrainModule, UserError
from trainer.examples.digits import DigitsClassifier
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST


def _data(n: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x.sum(dim=1) > 0).long())


class Recorder(TrainModule):
    """Records every hook with what self.trainer says there, and logs in the places Lightning allows."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
        self.calls: list = []
        self.seen: dict = {}

    def _record(self, name, *args):
        self.calls.append(name)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y, reduction="none")
        self.log("peak", loss.max(), reduce_fx="max")
        self.log("low", loss.min(), reduce_fx="min")
        self.log("rows", float(len(y)), reduce_fx="sum")
        self.calls.append("training_step")
        return loss

    def validation_step(self, batch, batch_idx):  # only logs, as most Lightning code does
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(-1) == y).float().mean())
        self.calls.append("validation_step")

    def configure_optimizers(self):
        self.seen["configure_optimizers"] = (self.trainer.max_epochs, self.trainer.estimated_stepping_batches,
                                             self.device.type)
        self.calls.append("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_epoch_start(self):
        self.seen.setdefault("epochs", []).append(self.current_epoch)
        self._record("on_train_epoch_start")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.seen.setdefault("steps", []).append(self.global_step)
        self._record("on_train_batch_end")

    def on_train_epoch_end(self):
        self.log("epoch_marker", float(self.current_epoch + 10))
        self._record("on_train_epoch_end")

    def on_validation_epoch_end(self):
        self.seen.setdefault("val", []).append(float(self.trainer.callback_metrics["val_acc"]))
        self._record("on_validation_epoch_end")

    def on_save_checkpoint(self, checkpoint):
        checkpoint["recorder"] = {"calls": len(self.calls)}


for _name in ("prepare_data", "setup", "configure_model", "on_fit_start", "on_train_start", "on_train_batch_start",
              "on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
              "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
              "on_validation_end", "on_train_end", "on_fit_end", "teardown"):
    setattr(Recorder, _name, (lambda name: lambda self, *args: self._record(name, *args))(_name))

EPOCH = (["on_train_epoch_start"]
         + 2 * (["on_train_batch_start", "training_step", "on_before_zero_grad", "on_before_backward",
                 "on_after_backward", "on_train_batch_end",
                 "on_train_batch_start", "training_step", "on_before_backward", "on_after_backward",
                 "on_before_optimizer_step", "on_train_batch_end"])
         + ["on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "validation_step",
            "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end", "on_train_epoch_end"])
LIGHTNING_ORDER = (["prepare_data", "setup", "configure_model", "configure_optimizers", "on_fit_start",
                    "on_train_start"] + 2 * EPOCH + ["on_train_end", "on_fit_end", "teardown"])


def _fit(module, tmp_path, name="run", **options):
    options = {"max_epochs": 2, "log_every_n_steps": 1, "accumulate_grad_batches": 2, **options}
    return Trainer(devices=1, run_dir=str(tmp_path / name), progress_bar=False, env_profile="cpu",
                   **options).fit(module, DataLoader(_data(32), batch_size=8), DataLoader(_data(16, 1), batch_size=16))


def test_hooks_run_in_lightnings_order_with_lightnings_arguments(xla_device, tmp_path):
    module = Recorder()
    result = _fit(module, tmp_path)
    assert module.calls == LIGHTNING_ORDER
    assert module.seen["configure_optimizers"] == (2, 4, "xla")  # 2 epochs x 4 batches / 2 accumulated
    assert module.seen["epochs"] == [0, 1]  # self.current_epoch, 0-based as in Lightning
    assert module.seen["steps"] == [0, 1, 1, 2, 2, 3, 3, 4]  # global_step counts optimizer steps
    assert module.seen["val"] == [row["val_acc"] for row in result.history]  # callback_metrics in the hook


def test_self_log_reduces_as_asked_and_epoch_hooks_log_per_epoch(xla_device, tmp_path):
    module = Recorder()
    result = _fit(module, tmp_path, accumulate_grad_batches=1)
    torch.manual_seed(0)
    with open(tmp_path / "run" / "steps.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    epoch1 = [r for r in rows if r["epoch"] == "1"]
    first = result.history[0]
    assert first["peak"] == pytest.approx(max(float(r["peak"]) for r in epoch1))  # reduce_fx="max"
    assert first["low"] == pytest.approx(min(float(r["low"]) for r in epoch1))
    assert first["peak"] > first["low"]  # negative control: the two reductions differ
    assert first["rows"] == 32.0  # reduce_fx="sum" of a host number: every row of the epoch
    assert [r["epoch_marker"] for r in result.history] == [10.0, 11.0]  # on_train_epoch_end, once per epoch
    assert "epoch_marker" not in rows[0]  # an epoch hook logs no step value


def test_checkpoint_hooks_and_hyper_parameters_are_saved_and_restored(xla_device, tmp_path):
    _fit(Recorder(hidden=12), tmp_path)
    final = torch.load(tmp_path / "run" / "checkpoints" / "final.ckpt", weights_only=True)
    assert final["hyper_parameters"] == {"hidden": 12} and final["recorder"]["calls"] > 0
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["resolved"]["hyper_parameters"] == {"hidden": 12}

    class Restores(Recorder):
        def on_load_checkpoint(self, checkpoint):
            self.loaded = checkpoint["recorder"]

    resumed = Restores(hidden=12)
    _fit(resumed, tmp_path, max_epochs=3, resume="auto")
    assert resumed.loaded == final["recorder"]


class OldEpochStart(DigitsClassifier):
    def on_train_epoch_start(self, epoch):
        pass


class OldValidationEnd(DigitsClassifier):
    def on_validation_epoch_end(self, epoch, metrics):
        pass


class WrongBatchEnd(DigitsClassifier):
    def on_train_batch_end(self, outputs):
        pass


@pytest.mark.parametrize("module, message", [
    (OldEpochStart, "OldEpochStart.on_train_epoch_start(epoch) has the old TrainModule signature. TrainModule hooks "
                    "now take Lightning's signatures: define on_train_epoch_start(self) with no argument"),
    (OldValidationEnd, "self.trainer.callback_metrics"),
    (WrongBatchEnd, "the engine calls on_train_batch_end(self, outputs, batch, batch_idx), as Lightning does"),
])
def test_a_hook_with_another_signature_is_named_with_what_changed(tmp_path, module, message):
    with pytest.raises(UserError) as caught:
        Trainer(devices=1, run_dir=str(tmp_path / "run"), env_profile="cpu").fit(module())
    assert message in str(caught.value)


class LogsWhereItMayNot(DigitsClassifier):
    def on_fit_start(self):
        self.log("x", 1.0)


class OddReduction(DigitsClassifier):
    def training_step(self, batch, batch_idx):
        losses = super().training_step(batch, batch_idx)
        self.log("median", losses.median(), reduce_fx=torch.median)
        return losses


class LogsAMetric(DigitsClassifier):
    def __init__(self):
        super().__init__()
        from torchmetrics.classification import MulticlassAccuracy

        self.accuracy = MulticlassAccuracy(num_classes=10, average="micro", validate_args=False)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.accuracy.update(self(x).argmax(-1), y)
        self.log("val_metric_acc", self.accuracy)
        return super().validation_step(batch, batch_idx)


def test_self_log_refusals_and_a_torchmetrics_metric(xla_device, tmp_path):
    options = {"devices": 1, "progress_bar": False, "env_profile": "cpu", "max_epochs": 1}
    with pytest.raises(UserError, match="self.log\\('x', ...\\) was called in on_fit_start, where Lightning does not"):
        Trainer(run_dir=str(tmp_path / "a"), **options).fit(LogsWhereItMayNot())
    with pytest.raises(UserError, match="reduce_fx='median'.*'mean', 'sum', 'max' or 'min'"):
        Trainer(run_dir=str(tmp_path / "b"), **options).fit(OddReduction())
    result = Trainer(run_dir=str(tmp_path / "c"), last_batch="drop", **options).fit(LogsAMetric())
    epoch = result.history[-1]  # computed over the epoch by the Metric itself; the engine's own mean agrees
    assert epoch["val_metric_acc"] == pytest.approx(epoch["val_accuracy"], abs=1e-6) and epoch["val_accuracy"] > 0.5


def test_debug_names_a_host_read_made_in_a_hook(tmp_path):
    run = run_cli("train", "--module", "tests.helpers_modules:ReadsInAHook", "--max-epochs", "1", "--debug",
                  "--no-progress", "--env-profile", "cpu", run_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "device->host read(s) inside the training step" in run.stderr
    assert "on_before_backward" in run.stderr and "helpers_modules.py" in run.stderr  # the hook's own line


def test_a_fit_without_a_seed_leaves_the_rng_alone_and_records_the_seed_it_used(xla_device, tmp_path, monkeypatch):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    torch.manual_seed(7)
    Recorder()
    for loader in (DataLoader(_data(32), batch_size=8), DataLoader(_data(16, 1), batch_size=16)):
        list(loader)  # each iteration of a DataLoader draws its base seed from torch's RNG
    state = torch.get_rng_state()  # a plain loop over one epoch leaves this
    torch.manual_seed(7)
    _fit(Recorder(), tmp_path, max_epochs=1)
    assert torch.equal(torch.get_rng_state(), state)  # the fit drew nothing more, and reseeded nothing
    manifest = json.loads((tmp_path / "run" / RUN_MANIFEST).read_text())
    assert (manifest["seed"], manifest["seed_source"]) == (7, "torch.initial_seed")
    _fit(Recorder(), tmp_path, "seeded", max_epochs=1, seed=3)  # negative control: asked to seed, it does
    assert not torch.equal(torch.get_rng_state(), state)
