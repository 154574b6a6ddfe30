"""FSDP over the SPMD mesh on 8 emulated devices, through the real library and CLI.

`pytest tests/test_fsdp.py` (about 4 minutes on 2 cores). The layout of every tensor
is read from torch_xla itself (tests/fsdp_probe.py), never from the engine's own
bookkeeping; data parallelism, read the same way, is the negative control. Losses are
compared step by step between strategies (and against another seed, which must
differ), and sharded checkpoints are interrupted, killed, corrupted and resharded.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from checkpoint_helpers import BIG, REPO, finish, run, start, steps, text, train_argv, wait_for
from conftest import run_cli
from trainer.outputs.atomic_files import TMP_PREFIX
from trainer.checkpoint.store import CheckpointStore

pytestmark = pytest.mark.slow

FSDP8 = ("--cores", "8", "--strategy", "fsdp")
PAUSE = ["--set", "module_args.step_sleep=0.05"]
# fp32 on CPU-XLA: the strategies reduce in different orders, so losses agree to rounding, not bitwise.
LOSS_TOLERANCE = 1e-4


def _probe(tmp_path, strategy: str, mesh: str) -> dict:
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "fsdp_probe.py"), strategy, mesh, str(tmp_path / "run")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mesh, fsdp", [("", 8), ("data:2,fsdp:4", 4)])
def test_fsdp_shards_every_parameter_its_gradient_and_its_adamw_state(tmp_path, mesh, fsdp):
    layout = _probe(tmp_path, "fsdp", mesh)
    assert len(layout) == 6
    for name, tensors in layout.items():
        param = tensors["param"]
        shape, local = param["shape"], param["local_shapes"]
        dim = shape.index(max(shape))  # FSDPv2 shards the largest dimension
        expected = [math.ceil(n / fsdp) if d == dim else n for d, n in enumerate(shape)]
        assert len(local) == 8 and all(s == expected for s in local), (name, shape, local)
        assert tensors["exp_avg"]["spec"] == param["spec"] and tensors["exp_avg"]["local_shapes"] == local, name
        assert tensors["grad_spec"] == param["spec"], name


def test_data_parallel_holds_a_full_copy_on_every_device(tmp_path):
    for name, tensors in _probe(tmp_path, "data", "").items():
        param = tensors["param"]
        assert param["spec"] in ("", "{replicated}"), name
        assert param["local_shapes"] == [param["shape"]] * 8, name
        assert tensors["exp_avg"]["local_shapes"] == [param["shape"]] * 8, name


def _losses(tmp_path, name: str, *args: str) -> tuple[list[float], dict]:
    result = run_cli("train", "--cores", "8", "--max-epochs", "2", "--log-every-n-steps", "1", "--no-progress",
                     *args, run_dir=tmp_path / name)
    assert result.returncode == 0, result.stderr[-3000:]
    return [float(loss) for _, _, loss in steps(tmp_path / name)], result.summary


def test_fsdp_hybrid_and_data_parallel_train_the_same_model(tmp_path):
    data, data_summary = _losses(tmp_path, "data")
    fsdp, fsdp_summary = _losses(tmp_path, "fsdp", "--strategy", "fsdp")
    hybrid, hybrid_summary = _losses(tmp_path, "hybrid", "--strategy", "fsdp", "--mesh", "data:2,fsdp:4")
    other_seed, _ = _losses(tmp_path, "seed1", "--seed", "1")
    assert len(data) == len(fsdp) == len(hybrid) == 46 >= 20
    for losses in (fsdp, hybrid):
        assert max(abs(a - b) for a, b in zip(data, losses)) < LOSS_TOLERANCE
    # Negative control: a run that is really different is far outside the tolerance.
    assert max(abs(a - b) for a, b in zip(data, other_seed)) > 100 * LOSS_TOLERANCE
    assert data[-1] < data[0] / 3
    for summary in (data_summary, fsdp_summary, hybrid_summary):
        assert summary["compiles_after_first_epoch"] == 0
    assert (fsdp_summary["mesh"], hybrid_summary["mesh"]) == ("data:1,fsdp:8", "data:2,fsdp:4")


def test_fsdp_resumes_bitwise_after_sigterm_and_reshards_on_other_meshes(tmp_path):
    ref, cut = tmp_path / "reference", tmp_path / "interrupted"
    assert run(train_argv(ref, *FSDP8), tmp_path / "reference.log") == 0, text(tmp_path / "reference.log")[-3000:]
    assert "set_up_planner has been updated" not in text(tmp_path / "reference.log")  # torch's DCP warning, per save
    log = tmp_path / "interrupted.log"
    proc = start(train_argv(cut, *PAUSE, *FSDP8), log)
    epoch_one = CheckpointStore(cut / "checkpoints")
    wait_for(lambda: epoch_one.manifest_path.exists() and bool(epoch_one.entries()), "epoch 1's checkpoint", proc,
             timeout=240)
    time.sleep(0.3)  # ~6 steps of 50 ms into epoch 2
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == 143, text(log)[-3000:]
    entry = CheckpointStore(cut / "checkpoints").entries()[-1]
    assert entry["file"].endswith(".dcp") and entry["position"]["epoch"] == 2 and 0 < entry["position"]["batch"] < 23
    assert {".metadata", "__0_0.distcp", "host.pt"} <= set(entry["files"])  # shards, not one gathered copy
    # The interrupted directory is copied first: each resume continues it in place.
    for name, extra in (("one-device", ("--cores", "1")), ("hybrid", (*FSDP8, "--mesh", "data:2,fsdp:4"))):
        subprocess.run(["cp", "-a", str(cut), str(tmp_path / name)], check=True)
        assert run(train_argv(tmp_path / name, *extra, "--resume", "auto"), tmp_path / f"{name}.log") == 0, \
            text(tmp_path / f"{name}.log")[-3000:]
        resumed = [float(loss) for _, _, loss in steps(tmp_path / name)]
        reference = [float(loss) for _, _, loss in steps(ref)]
        assert len(resumed) == 69 and max(abs(a - b) for a, b in zip(resumed, reference)) < LOSS_TOLERANCE
    assert run(train_argv(cut, *PAUSE, *FSDP8, "--resume", "auto"), tmp_path / "resumed.log") == 0, \
        text(tmp_path / "resumed.log")[-3000:]
    assert steps(cut) == steps(ref) and len(steps(ref)) == 69  # bitwise, every logged loss


def test_sigkill_during_a_sharded_save_keeps_the_previous_checkpoint_and_a_bad_shard_is_named(tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    store = CheckpointStore(checkpoints)
    args = [*FSDP8, "--set", "module_args.megabytes=64", "--set", "module_args.step_sleep=0.05",
            "--set", "checkpoint.every_n_steps=5"]
    proc = start(train_argv(run_dir, *args, module=BIG, epochs=1), tmp_path / "killed.log")
    wait_for(lambda: bool(store.entries()) and any(p.name.startswith(TMP_PREFIX) for p in checkpoints.iterdir()),
             "a second sharded checkpoint being written after a committed one", proc, timeout=240, poll=0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    assert finish(proc) == -signal.SIGKILL
    committed = store.entries()[-1]
    loaded, _ = store.newest_valid()
    assert loaded.path.name == committed["file"] and loaded.sharded_dir is not None

    shard = checkpoints / committed["file"] / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the shards
    shard.write_bytes(bytes(data))
    result = run_cli("train", "--module", BIG, *args, "--resume", str(checkpoints / committed["file"]),
                     "--max-epochs", "1", "--no-progress", "--env-profile", "cpu", run_dir=tmp_path / "from-bad")
    assert result.returncode == 2
    assert f"checkpoint shard {shard} failed verification: sha256 mismatch" in result.stderr


def test_a_tied_hugging_face_gpt2_trains_with_fsdp_and_activation_checkpointing(tmp_path):
    def gpt2(name: str, *extra: str) -> list[float]:
        result = run_cli("train", "--module", "tests.helpers_modules:TinyGPT2", *FSDP8, "--max-epochs", "2",
                         "--log-every-n-steps", "1", "--no-progress", *extra, run_dir=tmp_path / name)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "FSDP: 2 block(s) of GPT2Block wrapped" in result.stderr
        assert "lm_head tied to wte: True" in result.stderr
        assert result.summary["compiles_after_first_epoch"] == 0
        return [float(loss) for _, _, loss in steps(tmp_path / name)], result.stderr

    plain, _ = gpt2("plain")
    assert plain[-1] < 0.7 * plain[0]
    recomputed, log = gpt2("checkpointed", "--set", "parallel.activation_checkpointing=[GPT2Block]")
    assert "activation checkpointing: 2 module(s) of GPT2Block" in log
    # Recomputation fuses differently: the first loss (a pure forward) agrees to fp32 rounding; after
    # that AdamW's first updates (about lr * sign(grad)) amplify rounding noise, so training is compared
    # by where it ends (measured: 3.05 vs 3.02 after 24 steps from 5.40).
    assert abs(plain[0] - recomputed[0]) < 1e-5
    assert recomputed[-1] < 0.7 * recomputed[0] and abs(recomputed[-1] - plain[-1]) < 0.1 * plain[-1]


@pytest.mark.parametrize("precision", ["bf16", "bf16-true"])
def test_fsdp_trains_in_bf16(tmp_path, precision):
    result = run_cli("train", *FSDP8, "--precision", precision, "--max-epochs", "3", "--no-progress",
                     run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.summary["val_accuracy"] > 0.9 and result.summary["compiles_after_first_epoch"] == 0


def test_fsdp_on_one_device_is_degraded_with_a_warning(caplog):
    from trainer import Trainer

    trainer = Trainer(devices=1, strategy="fsdp", env_profile="cpu")
    assert trainer.plan.parallel.mesh is None and not trainer.plan.parallel.fully_sharded
    assert "strategy='fsdp' on one device: there is nothing to shard over" in caplog.text


def test_devices_errors_are_spelled_as_the_user_wrote_them():
    from trainer import Trainer, UserError

    with pytest.raises(UserError) as err:
        Trainer(devices=3, env_profile="cpu")
    assert str(err.value).startswith("devices=3 is not a valid device selection")
    assert "Trainer(devices=8)" in str(err.value) and "CORES" not in str(err.value)
    cli = run_cli("train", "--cores", "3")
    assert "--cores 3 is not a valid device selection" in cli.stderr and "CORES" not in cli.stderr
    with pytest.raises(UserError, match=r"mesh='data:3,fsdp:4' has 12 devices .* but the run uses 8"):
        Trainer(devices=8, strategy="fsdp", mesh="data:3,fsdp:4", env_profile="cpu")
    with pytest.raises(UserError, match=r"strategy='fsdq' is not a strategy"):
        Trainer(devices=8, strategy="fsdq", env_profile="cpu")


def test_the_sharded_save_planner_has_torchs_signature():
    """torch 2.9 warns on every save when a planner's set_up_planner lacks `storage_meta`;
    torch_xla 2.9's SPMDSavePlanner lacks it (the negative control), ours has it."""
    import inspect

    from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

    from trainer.parallel.sharding import checkpoint_save_planner

    assert "storage_meta" not in inspect.signature(SPMDSavePlanner().set_up_planner).parameters
    assert "storage_meta" in inspect.signature(checkpoint_save_planner().set_up_planner).parameters
