"""The user's optimizer, untouched, in one graph per step: the engine against torch's own arithmetic.

`pytest tests/test_optimizer_view.py` (about 5 minutes on 2 cores; `-m "not slow"` skips the
8-device runs, about 3 minutes). Each recipe of `tests/optimizer_recipes.py` (AdamW, Adam,
SGD with Nesterov momentum; a warm-up from exactly 0 and a cosine to exactly 0, or
OneCycleLR from exactly 0; accumulation of 2 batches; clipping at 1.0) runs three ways on
the same data: through the engine, through a hand-written torch_xla loop (same optimizer
class and settings, the same scheduler stepped per optimizer step, one sync per batch as
the engine does), and eagerly on the CPU. The engine must equal the hand loop bitwise,
step by step (both run torch's own single-tensor optimizer code on the same XLA graphs;
another seed is the negative control), stay within float32 tolerance of the CPU (other
matmul kernels), compile nothing after warm-up where the hand loop does (AdamW: twice),
read nothing from the device outside its logging, and leave `param_groups`, in memory and in
its checkpoint, exactly as the CPU run leaves them. 8-device runs (SPMD data parallel and
FSDP) go through the real CLI.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import run_cli
from optimizer_recipes import OPTIMIZERS, OldEngineCheckpoint, Recipe
from trainer import Trainer, UserError, seed_everything
from trainer.checkpoint.store import CheckpointStore

EPOCHS, STEPS_PER_EPOCH = 3, 22
WARMUP_STEPS = 3  # the diagnostics' default: the graphs of the first steps (state created, accumulation)
# Eager CPU against XLA on CPU: other matmul and reduction kernels, so losses differ in their last bits
# (measured: at most 4.8e-7 over the 66 losses of every recipe here); the optimizer carries it on.
CPU_TOLERANCE = 1e-5
CASES = [(o, "lambda") for o in OPTIMIZERS] + [(o, "onecycle") for o in OPTIMIZERS]


def _recipe(optimizer: str, schedule: str, seed: int = 0, cls: type = Recipe, **kwargs) -> Recipe:
    seed_everything(seed)
    return cls(optimizer=optimizer, schedule=schedule, **kwargs)


def _groups(optimizer: torch.optim.Optimizer | dict) -> list[dict]:
    groups = optimizer["param_groups"] if isinstance(optimizer, dict) else optimizer.param_groups
    return [{k: v for k, v in g.items() if k != "params"} for g in groups]


def _fit(tmp_path: Path, name: str, module: Recipe, **options):
    options = {"max_epochs": EPOCHS, "accumulate_grad_batches": 2, "gradient_clip_val": 1.0,
               "log_every_n_steps": 1, **options}  # every step logs: one step graph (logging steps are another)
    trainer = Trainer(devices=1, run_dir=str(tmp_path / name), progress_bar=False, env_profile="cpu", **options)
    return trainer.fit(module)


def _logged(run_dir: Path, column: str = "loss") -> list[float]:
    with open(run_dir / "steps.csv", newline="") as f:
        return [float(row[column]) for row in csv.DictReader(f)]


def _stored_groups(run_dir: Path) -> list[dict]:
    store = CheckpointStore(run_dir / "checkpoints")
    entry = store.entries()[-1]
    return _groups(store.load(run_dir / "checkpoints" / entry["file"]).state["optimizer"])


def _by_hand(module: Recipe, device, epochs: int = EPOCHS) -> tuple[list[float], list[int], torch.optim.Optimizer]:
    """The recipe as a user writes it without the engine; returns per-step losses, compilations per step, optimizer.

    On XLA: one sync per batch and no host read until the end. Clipping goes over the optimizer's
    parameters in its order, as the engine does (the norm's summation order is part of the arithmetic)."""
    from trainer.runtime import backend

    module = module.to(device)
    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    on_xla = device.type == "xla"
    loader = module.train_dataloader()
    losses, compiles, window = [], [], None
    for _ in range(epochs):
        for index, (x, y) in enumerate(loader):
            before = backend.compile_count() if on_xla else 0
            loss = F.cross_entropy(module(x.to(device)), y.to(device)) / 2
            loss.backward()
            window = loss.detach() if window is None else window + loss.detach()
            if index % 2:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                losses.append(window)
                window = None
            if on_xla:
                backend.sync()
                compiles.append(backend.compile_count() - before)
    return [float(loss) for loss in losses], compiles, optimizer


def _compiles_after_warmup(per_batch: list[int]) -> int:
    return sum(per_batch[2 * WARMUP_STEPS:])


@pytest.mark.parametrize("optimizer, schedule", CASES)
def test_the_engine_runs_the_users_optimizer_as_torch_does_without_recompiling(xla_device, tmp_path, optimizer,
                                                                               schedule):
    # Host reads are counted in a run without logging steps: with a logging read in flight every step, the
    # diagnostics may see its copy and its .item() in different step windows (a read attributed to a step).
    module = _recipe(optimizer, schedule)
    quiet = _fit(tmp_path, "quiet", module, log_every_n_steps=10_000)
    summary = json.loads((quiet.run_dir / "summary.json").read_text())
    assert summary["recompilations_after_warmup"] == [] and quiet.compiles_per_epoch[-1] == 0
    assert summary["host_reads_outside_logging"] == 0 and summary["global_step"] == EPOCHS * STEPS_PER_EPOCH
    _, _, cpu_optimizer = _by_hand(_recipe(optimizer, schedule), torch.device("cpu"))
    assert _groups(module.optimizer_in_use) == _groups(cpu_optimizer)  # floats, weight_decay, capturable, keys
    assert all(type(g["lr"]) is float for g in module.optimizer_in_use.param_groups)
    assert _stored_groups(quiet.run_dir) == _groups(cpu_optimizer)
    steps = [s["step"] for s in module.optimizer_in_use.state.values() if "step" in s]
    assert all(s.device.type == "cpu" and float(s) == EPOCHS * STEPS_PER_EPOCH for s in steps)

    logged = _fit(tmp_path, "logged", _recipe(optimizer, schedule))
    assert json.loads((logged.run_dir / "summary.json").read_text())["recompilations_after_warmup"] == []
    engine, rates = _logged(logged.run_dir), _logged(logged.run_dir, "lr")
    assert len(engine) == EPOCHS * STEPS_PER_EPOCH and rates[0] == 0.0 and max(rates) > 0
    if schedule == "lambda":
        assert rates[2 * STEPS_PER_EPOCH:] == [0.0] * STEPS_PER_EPOCH  # a whole epoch at exactly 0
    hand, hand_compiles, _ = _by_hand(_recipe(optimizer, schedule), xla_device)
    assert engine == hand  # bitwise, every optimizer step
    other_seed, _, _ = _by_hand(_recipe(optimizer, schedule, seed=1), xla_device)
    assert max(abs(a - b) for a, b in zip(hand, other_seed)) > 1e-3  # negative control: the comparison can fail
    if optimizer == "adamw" and schedule == "lambda":
        # Without the engine the same recipe compiles again: where AdamW's decay factor 1 - lr * 0.1 equals
        # beta2 (the peak) and 1.0 (the rate reaches 0).
        assert _compiles_after_warmup(hand_compiles) >= 2, hand_compiles
    cpu, _, _ = _by_hand(_recipe(optimizer, schedule), torch.device("cpu"))
    assert max(abs(a - b) for a, b in zip(engine, cpu)) < CPU_TOLERANCE


def test_a_checkpoint_of_the_old_engine_resumes_with_the_users_settings(xla_device, tmp_path):
    """The old engine's rewritten groups (tests/optimizer_recipes.py:OldEngineCheckpoint writes them as
    commit 48b8924 did, key for key) continue exactly like a run that was never interrupted."""
    reference = _recipe("adamw", "restart", epochs=2)
    _fit(tmp_path, "reference", reference, max_epochs=2)
    _fit(tmp_path, "old", _recipe("adamw", "restart", cls=OldEngineCheckpoint, epochs=2), max_epochs=1)
    old = _stored_groups(tmp_path / "old")
    assert [(g["weight_decay"], g["lr"], g["capturable"], g["_tpu_trainer_lr_is_zero"]) for g in old] == \
        [(0.0, 1e-12, True, True)] * 2  # the old format, at a rate of exactly 0 (the epoch's restart)

    resumed = _recipe("adamw", "restart", epochs=2)
    _fit(tmp_path, "old", resumed, max_epochs=2, resume="auto")
    assert _logged(tmp_path / "old") == _logged(tmp_path / "reference")  # bitwise, both epochs
    assert _groups(resumed.optimizer_in_use) == _groups(reference.optimizer_in_use)
    assert [g["weight_decay"] for g in resumed.optimizer_in_use.param_groups] == [0.1, 0.0]
    assert all(s["step"].device.type == "cpu" for s in resumed.optimizer_in_use.state.values())
    assert _stored_groups(tmp_path / "old") == _groups(reference.optimizer_in_use)

    # Negative control: continuing with the checkpoint's weight_decay of 0 gives other losses.
    _fit(tmp_path, "old-no-decay", _recipe("adamw", "restart", cls=OldEngineCheckpoint, epochs=2), max_epochs=1)
    _fit(tmp_path, "old-no-decay", _recipe("adamw", "restart", epochs=2, weight_decay=0.0), max_epochs=2,
         resume="auto")
    assert _logged(tmp_path / "old-no-decay")[STEPS_PER_EPOCH:] != _logged(tmp_path / "reference")[STEPS_PER_EPOCH:]


class WithAdafactor(Recipe):
    def configure_optimizers(self):
        return torch.optim.Adafactor(self.parameters(), lr=1e-2)


def test_adafactor_is_refused_with_the_reason(xla_device, tmp_path):
    with pytest.raises(UserError, match=r"torch.optim.Adafactor, which reads two values from the device for every "
                                        r"parameter in every step .* Fix: use torch.optim.AdamW"):
        _fit(tmp_path, "adafactor", WithAdafactor())


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["data", "fsdp"])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_on_8_devices_nothing_recompiles_and_nothing_is_read(tmp_path, strategy, optimizer):
    """The lambda schedule (its third epoch at exactly 0); no logging steps, so every host read would be counted."""
    result = run_cli("train", "--module", "tests.optimizer_recipes:Recipe", "--cores", "8", "--strategy", strategy,
                     "--max-epochs", str(EPOCHS), "--accumulate-grad-batches", "2", "--gradient-clip-val", "1.0",
                     "--log-every-n-steps", "10000", "--no-progress", "--set", f"module_args.optimizer={optimizer}",
                     run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.summary
    assert summary["recompilations_after_warmup"] == [] and summary["compiles_per_epoch"][-1] == 0
    assert summary["host_reads_outside_logging"] == 0 and summary["global_step"] == EPOCHS * STEPS_PER_EPOCH
    with open(tmp_path / "run" / "metrics.csv", newline="") as f:
        losses = [float(row["train_loss"]) for row in csv.DictReader(f)]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0] / 2
    if strategy == "data":  # a whole checkpoint: its groups read as an eager CPU run leaves them (FSDP's: shards)
        _, _, cpu_optimizer = _by_hand(_recipe(optimizer, "lambda"), torch.device("cpu"))
        assert _stored_groups(tmp_path / "run") == _groups(cpu_optimizer)
