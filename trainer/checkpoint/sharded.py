"""The device state of a sharded model, saved and loaded shard by shard.

Under FSDP no device holds a whole parameter, so gathering a full copy on one host to
save it would need the memory the sharding exists to avoid. Instead the module's and
optimizer's state dicts go through `torch.distributed.checkpoint` with torch_xla's SPMD
planners: each process writes only the shards it holds (`__<rank>_0.distcp`) plus the
global layout (`.metadata`). Loading reads the layout and fills whatever sharding the
live tensors have, so a checkpoint saved on fsdp:8 loads on data:2,fsdp:4, on a
data-parallel mesh, or on one device (measured, torch_xla 2.9, PJRT CPU).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from trainer.outputs.atomic_files import TMP_PREFIX, fsync_dir
from trainer.checkpoint.io import save_atomic, sha256_of
from trainer.checkpoint.verify import CheckpointError, load_host_state, read_verified


def write_sharded(module: Any, optimizer: Any, directory: Path) -> None:
    """Write this process's shards of the module and optimizer state into `directory` (fsynced)."""
    import torch.distributed.checkpoint as dcp

    from trainer.parallel.sharding import checkpoint_save_planner

    state = {"module": module.state_dict(), "optimizer": optimizer.state_dict()}
    with _library_notices_silenced():
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(directory), sync_files=True),
                 planner=checkpoint_save_planner(), no_dist=True)


def read_sharded(directory: Path, module: Any, optimizer: Any, spmd: bool) -> None:
    """Load `directory`'s shards into the live (possibly sharded) module and optimizer (None: the module
    only), in place."""
    import torch.distributed.checkpoint as dcp

    from trainer.parallel.sharding import checkpoint_load_planner, prime_optimizer

    target = {"module": module.state_dict()}  # optimizer None: the weights only (Trainer.validate's ckpt_path)
    if optimizer is not None:
        prime_optimizer(optimizer)  # the optimizer's state must exist for an in-place load
        target["optimizer"] = optimizer.state_dict()
    try:
        with _library_notices_silenced():
            dcp.load(target, storage_reader=dcp.FileSystemReader(str(directory)),
                     planner=checkpoint_load_planner(spmd), no_dist=True)
    except Exception as exc:  # noqa: BLE001 - a mismatch surfaces as many exception types
        raise CheckpointError(
            f"the sharded checkpoint {directory} does not fit this model and optimizer: {exc}. A sharded "
            "checkpoint loads on any mesh or device count, but the parameters (names and shapes) and the "
            "optimizer must be the ones it was saved from. Fix: resume with the same module and "
            "module_args, or start a new run."
        ) from exc
    module.load_state_dict(target["module"])
    if optimizer is not None:
        optimizer.load_state_dict(target["optimizer"])


@contextlib.contextmanager
def _library_notices_silenced():
    """torch 2.9's checkpoint code warns about its own internals on every save and load
    (TypedStorage, list indexing in torch_xla's shard view, "assuming a single process",
    which is our case by design); nothing a user can act on, so only these are hidden."""
    with warnings.catch_warnings():
        for message in ("TypedStorage is deprecated", "Using a non-tuple sequence for multidimensional indexing",
                        "torch.distributed is disabled"):
            warnings.filterwarnings("ignore", message=message)
        yield


HOST_STATE = "host.pt"
"""Inside a checkpoint directory: everything but the shards (step, position, RNG, scheduler...)."""


def write_checkpoint_dir(module: Any, optimizer: Any, host_state: dict, path: Path) -> dict:
    """Write a whole checkpoint directory at `path` (a temporary renamed into place).

    Returns its manifest fields: per-file size and SHA-256, their total and one digest
    over all of them. Each file is fsynced before it is hashed, so the hash is of what
    is on disk; a kill before the rename leaves only a temporary (removed at next start).
    """
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{path.name}.", dir=path.parent))
    try:
        write_sharded(module, optimizer, tmp)
        save_atomic(host_state, tmp / HOST_STATE)
        files = {}
        for item in sorted(tmp.iterdir()):
            if item.name.startswith(TMP_PREFIX):
                continue
            with open(item, "rb") as f:
                os.fsync(f.fileno())
            files[item.name] = {"sha256": sha256_of(item), "bytes": item.stat().st_size}
        fsync_dir(tmp)
        if path.exists():  # an older copy whose entry was retired under another name
            shutil.rmtree(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return {"sha256": files_digest(files), "bytes": sum(f["bytes"] for f in files.values()), "files": files}


def verify_checkpoint_dir(path: Path, entry: dict) -> dict:
    """Check every file of a committed checkpoint directory; returns its host state.

    A missing, truncated or altered shard is a CheckpointError naming that file.
    """
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is listed in the manifest but the directory is missing.")
    for name, recorded in sorted(entry["files"].items()):
        data = read_verified(path / name, recorded, what="checkpoint shard" if name != HOST_STATE else "checkpoint")
        if name == HOST_STATE:
            host = load_host_state(data, path / name)
    extra = sorted(p.name for p in path.iterdir() if p.name not in entry["files"])
    if extra:
        raise CheckpointError(f"checkpoint {path} holds files its manifest entry does not list: {', '.join(extra)}.")
    return host


def files_digest(files: dict) -> str:
    digest = hashlib.sha256()
    for name, recorded in sorted(files.items()):
        digest.update(f"{name} {recorded['sha256']} {recorded['bytes']}\n".encode())
    return digest.hexdigest()
