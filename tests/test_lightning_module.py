"""Lightning's own modules, unchanged, through our Trainer, and side by side with Lightning's Trainer.

`pytest tests/test_lightning_module.py` (about 6 minutes on 2 cores; the 8-device runs are
subprocesses, tests/lightning_probe.py). Lightning is a test dependency only: the engine
recognises its classes by name. Every comparison has its negative control: losses against
Lightning's Trainer on the CPU agree to LOSS_TOLERANCE, and another seed does not.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

from checkpoint_helpers import REPO, run, steps, train_argv
from trainer import Trainer, UserError
from trainer.outputs.run_manifest import FILE as RUN_MANIFEST

# torch's CPU kernels and XLA's CPU compiler sum in different orders: equal to rounding, not bitwise.
LOSS_TOLERANCE = 1e-5


def _losses_csv(run_dir) -> list[float]:
    with open(run_dir / "steps.csv", newline="") as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def _ours(module_cls, seed, run_dir, epochs=2, **options):
    import pytorch_lightning as pl

    options.setdefault("log_every_n_steps", 1)
    pl.seed_everything(seed)  # and no seed=: the engine leaves the RNG as the script set it
    module = module_cls()
    result = Trainer(devices=1, max_epochs=epochs, run_dir=str(run_dir), progress_bar=False, env_profile="cpu",
                     **options).fit(module)
    return module, _losses_csv(run_dir), result


def _lightning(module_cls, seed, epochs=2):
    import pytorch_lightning as pl

    losses = []

    class Losses(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    pl.seed_everything(seed)
    module = module_cls()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, num_sanity_val_steps=0,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, callbacks=[Losses()])
    trainer.fit(module)
    return module, losses, {k: float(v) for k, v in trainer.callback_metrics.items()}


def test_side_by_side_with_lightnings_trainer_same_losses_and_hook_order(xla_device, tmp_path, fresh_seed_env):
    from helpers_lightning import RECORDED, RecordedSplit

    theirs, their_losses, their_metrics = _lightning(RecordedSplit, 42)
    ours, our_losses, result = _ours(RecordedSplit, 42, tmp_path / "ours")
    assert len(our_losses) == len(their_losses) == 32  # 64 rows of a random split, batch 4, 2 epochs
    assert max(abs(a - b) for a, b in zip(our_losses, their_losses)) < LOSS_TOLERANCE
    assert our_losses[-1] < our_losses[0] / 2  # it trains
    assert ours.calls == theirs.calls and set(ours.calls) == set(RECORDED)
    assert ours.calls.index("train_dataloader") < ours.calls.index("on_fit_start")  # asked for inside configure_optimizers
    # self.trainer.callback_metrics as Lightning fills it: val_mse (validation_step only logs) the epoch
    # mean, train_mse (on_step by default in training_step) the last step's value; ours adds train_loss
    assert set(theirs.final_metrics) == {"val_mse", "train_mse"} and set(ours.final_metrics) == {
        "val_mse", "train_mse", "train_loss"}
    assert all(abs(ours.final_metrics[k] - v) < 10 * LOSS_TOLERANCE for k, v in theirs.final_metrics.items())
    assert result.history[-1]["val_mse"] == pytest.approx(their_metrics["val_mse"], abs=10 * LOSS_TOLERANCE)
    _, other_seed, _ = _lightning(RecordedSplit, 43)  # negative control: another seed, another split and init
    assert max(abs(a - b) for a, b in zip(our_losses, other_seed)) > 1000 * LOSS_TOLERANCE
    manifest = json.loads((tmp_path / "ours" / RUN_MANIFEST).read_text())
    assert (manifest["seed"], manifest["seed_source"]) == (42, "PL_GLOBAL_SEED")


def test_boring_model_with_its_own_dataloaders_on_one_device(xla_device, tmp_path, fresh_seed_env):
    from pytorch_lightning.demos.boring_classes import BoringModel

    _, losses, result = _ours(BoringModel, 0, tmp_path / "run", log_every_n_steps=8)
    assert len(losses) == 16 and result.history[-1]["global_step"] == 128  # batch 1, 64 per epoch
    assert result.compiles_per_epoch[1] == 0
    assert "val_x" in result.history[-1]  # its validation_step returns {"x": loss}
    assert result.history[-1]["host_transfers_per_step_outside_logging"] == 0


def test_demo_model_with_our_loaders_loss_falls(xla_device, tmp_path):
    from pytorch_lightning.demos.boring_classes import DemoModel, RandomDataset

    torch.manual_seed(0)
    module = DemoModel()
    result = Trainer(devices=1, max_epochs=3, run_dir=str(tmp_path / "run"), progress_bar=False, env_profile="cpu",
                     log_every_n_steps=1).fit(module, DataLoader(RandomDataset(32, 256), batch_size=16))
    train = [row["train_loss"] for row in result.history]
    assert train[-1] < train[0] / 2 and result.compiles_per_epoch[1:] == [0, 0]
    assert module._trainer is None and module._current_fx_name is None  # the module reads back as it was


def test_a_sigterm_resume_of_a_lightning_module_is_bitwise_and_keeps_its_checkpoint_state(tmp_path):
    module = "tests.helpers_lightning:SignalsAndCounts"
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert run(train_argv(whole, module=module, epochs=2), tmp_path / "whole.log") == 0
    argv = train_argv(cut, "--set", "module_args.signal_epoch=1", "--set", "module_args.signal_batch=40",
                      module=module, epochs=2)
    assert run(argv, tmp_path / "cut.log") != 0  # stopped by its own SIGTERM after a checkpoint
    assert run(train_argv(cut, "--resume", "auto", module=module, epochs=2), tmp_path / "resume.log") == 0
    assert steps(cut) == steps(whole) and len(steps(whole)) == 128
    final = torch.load(cut / "checkpoints" / "final.ckpt", weights_only=True)
    assert final["batches_seen"] == 128  # on_save_checkpoint's state survived the resume


BODIES = {
    "automatic_optimization": "def __init__(self):\n        super().__init__()\n        self.automatic_optimization = False",
    "optimizer_step": "def optimizer_step(self, *args, **kwargs):\n        return super().optimizer_step(*args, **kwargs)",
    "lr_scheduler_step": "def lr_scheduler_step(self, scheduler, metric):\n        scheduler.step()",
    "toggle_optimizer": "def training_step(self, batch, batch_idx):\n        self.toggle_optimizer(self.optimizers())\n"
                        "        return super().training_step(batch, batch_idx)",
    "dataloader_iter": "def training_step(self, dataloader_iter):\n        return super().training_step(next(dataloader_iter), 0)",
}


@pytest.mark.parametrize("unsupported, message", [
    ("automatic_optimization", "sets automatic_optimization = False (manual optimization)"),
    ("optimizer_step", "overrides optimizer_step(), which tpu-trainer does not run"),
    ("lr_scheduler_step", "overrides lr_scheduler_step(), which tpu-trainer does not run"),
    ("toggle_optimizer", "calls self.toggle_optimizer(...)"),
    ("dataloader_iter", "training_step takes dataloader_iter"),
])
def test_what_the_engine_does_not_run_is_refused_before_xla_starts(tmp_path, unsupported, message):
    """In a fresh process: the UserError comes before torch_xla is even imported."""
    script = f"""
import sys, torch
from pytorch_lightning.demos.boring_classes import BoringModel
from trainer import Trainer, UserError

class Module(BoringModel):
    {BODIES[unsupported]}

try:
    Trainer(devices=1, run_dir={str(tmp_path / "run")!r}, env_profile="cpu").fit(Module())
except UserError as exc:
    print(exc)
    print("torch_xla imported:", "torch_xla" in sys.modules)
"""
    path = tmp_path / "unsupported.py"  # a file: the source check reads the module's class from it
    path.write_text(script)
    proc = subprocess.run([sys.executable, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert message in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "torch_xla imported: False" in proc.stdout


def test_several_optimizers_are_refused_with_their_count(xla_device, tmp_path):
    from pytorch_lightning.demos.boring_classes import BoringModel

    class TwoOptimizers(BoringModel):
        def configure_optimizers(self):
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.parameters())]

    with pytest.raises(UserError, match="configure_optimizers\\(\\) returned 2 optimizers; tpu-trainer trains with one"):
        Trainer(devices=1, run_dir=str(tmp_path / "run"), env_profile="cpu", progress_bar=False).fit(TwoOptimizers())


def _probe(scenario: str, tmp_path) -> dict:
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "lightning_probe.py"), scenario, str(tmp_path / "run")],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_boring_model_on_8_devices_with_a_batch_the_mesh_divides(tmp_path):
    out = _probe("boring", tmp_path)
    assert out["compiles"][1] == 0 and out["history"][-1]["train_loss"] < out["history"][0]["train_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["transformer", "transformer-fsdp"])
def test_lightning_transformer_on_stdlib_text_on_8_devices(tmp_path, scenario):
    out = _probe(scenario, tmp_path)
    first, last = out["history"][0]["train_loss"], out["history"][-1]["train_loss"]
    assert out["compiles"][1] == 0 and last < first, out


def test_lightning_transformer_on_stdlib_text_on_one_device(xla_device, tmp_path, monkeypatch):
    from lightning_text import stdlib_wikitext
    from pytorch_lightning.demos.transformer import LightningTransformer, WikiText2

    stdlib_wikitext(tmp_path)
    monkeypatch.chdir(tmp_path)  # the demo reads ./data/wikitext-2.txt; its prepare_data finds it and downloads nothing
    torch.manual_seed(0)
    module = LightningTransformer(vocab_size=WikiText2(download=False).vocab_size)
    result = Trainer(devices=1, max_epochs=2, run_dir=str(tmp_path / "run"), progress_bar=False,
                     env_profile="cpu").fit(module)  # its own prepare_data and train_dataloader (batch 1)
    first, last = result.history[0]["train_loss"], result.history[-1]["train_loss"]
    assert result.compiles_per_epoch[1] == 0 and last < first


@pytest.mark.slow
def test_configure_model_layers_are_sharded_as_they_are_created(tmp_path):
    built = _probe("configure-model", tmp_path / "a")
    assert built["specs"] and all(spec.startswith("{devices=[") for spec in built["specs"])  # before any wrap
    assert built["setup_growth_mb"] < built["model_mb"] / 2, built
    control = _probe("init-model", tmp_path / "b")  # the same layers built in __init__: whole on the host first
    assert control["setup_growth_mb"] > built["model_mb"], control


@pytest.mark.slow
def test_test_and_predict_after_an_fsdp_fit_on_8_devices_load_the_sharded_last_checkpoint(tmp_path):
    out = _probe("evaluate", tmp_path)
    assert out["test_y"] == pytest.approx(out["by_hand"], rel=1e-5), out  # BoringModel's test_step, real rows only
    assert abs(out["untrained"] - out["by_hand"]) > 0.1, out  # negative control: the checkpoint's weights matter
    assert out["shapes"] == [[8, 2]] * 7 + [[4, 2]] and out["max_difference"] < 1e-5, out
