"""`Trainer` used as a library with plain DataLoaders, in process on one PJRT CPU device.

`pytest tests/test_engine.py`. The user code here has no XLA in it, on purpose.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from trainer import Trainer, TrainModule
from trainer.examples.digits import DigitsClassifier, digits_datasets


def _fit(module, tmp_path, train=None, val=None, **options):
    options.setdefault("max_epochs", 3)
    trainer = Trainer(devices=1, run_dir=str(tmp_path / "run"), progress_bar=False, env_profile="cpu", **options)
    return trainer.fit(module, train, val)


def test_no_recompilation_after_the_first_epoch_with_ragged_batches(xla_device, tmp_path):
    train, val = digits_datasets()
    assert len(train) % 64 and len(val) % 64  # both loaders end with a ragged batch
    result = _fit(DigitsClassifier(), tmp_path)
    assert result.compiles_per_epoch[0] > 0
    assert result.compiles_per_epoch[1:] == [0, 0]
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_validation_metrics_are_exact_despite_padding(xla_device, tmp_path):
    module = DigitsClassifier()
    result = _fit(module, tmp_path, max_epochs=2)
    state = torch.load(tmp_path / "run" / "checkpoints" / "final.ckpt", map_location="cpu")
    reference = DigitsClassifier()
    reference.load_state_dict(state["module"])
    _, val = digits_datasets()
    x, y = val.tensors
    with torch.no_grad():
        logits = reference(x)
    assert result.metrics["val_accuracy"] == pytest.approx((logits.argmax(-1) == y).float().mean().item(), abs=1e-6)
    assert result.metrics["val_loss"] == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-4)


class EarlyOptimizer(TrainModule):
    """Builds its optimizer in __init__, before the engine moves it: the Fabric trap."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return {"accuracy": (self.net(x).argmax(-1) == y).float()}

    def configure_optimizers(self):
        return self.opt


def test_optimizer_built_before_fit_still_trains(xla_device, tmp_path):
    train, val = digits_datasets()
    with pytest.warns(UserWarning, match="scalar loss"):
        result = _fit(EarlyOptimizer(), tmp_path, DataLoader(train, batch_size=32, shuffle=True),
                      DataLoader(val, batch_size=32), max_epochs=4)
    assert result.metrics["val_accuracy"] > 0.85
    assert result.history[-1]["train_loss"] < 0.5 * result.history[0]["train_loss"]


class TiedAutoencoder(TrainModule):
    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(64, 16, bias=False)
        self.shared = self.encode.weight  # the decoder reuses the encoder's weight

    def training_step(self, batch, batch_idx):
        x, _ = batch
        return ((F.linear(self.encode(x), self.shared.T) - x) ** 2).mean(dim=1)

    def validation_step(self, batch, batch_idx):
        return self.training_step(batch, batch_idx)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def test_shared_parameters_stay_shared_through_training(xla_device, tmp_path):
    module = TiedAutoencoder()
    distinct = len({id(p) for p in module.parameters()})
    train, val = digits_datasets()
    result = _fit(module, tmp_path, DataLoader(train, batch_size=64), DataLoader(val, batch_size=64), max_epochs=2)
    assert module.shared is module.encode.weight
    assert len({id(p) for p in module.parameters()}) == distinct
    assert result.history[-1]["val_loss"] < result.history[0]["val_loss"]


def test_drop_last_batch_trains_on_full_batches_only(xla_device, tmp_path):
    result = _fit(DigitsClassifier(), tmp_path, max_epochs=2, last_batch="drop")
    assert result.history[0]["global_step"] == 1437 // 64


def test_existing_run_directory_is_never_overwritten(xla_device, tmp_path):
    from trainer.errors import UserError

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.csv").write_text("precious\n")
    with pytest.raises(UserError, match="already holds files"):
        _fit(DigitsClassifier(), tmp_path)
    assert (tmp_path / "run" / "metrics.csv").read_text() == "precious\n"
