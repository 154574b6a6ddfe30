"""Sharding on the SPMD mesh: the mesh object, the batch's spec, FSDP, activation checkpointing.

Every torch_xla sharding call the engine makes is here (a successor backend replaces
this module). The axes come from `trainer.parallel.mesh`; nothing else names them.

FSDP is torch_xla's own FSDPv2 (`SpmdFullyShardedDataParallel`, pytorch/xla
docs/source/perf/fsdp_spmd.md): each wrapped block's parameters are sharded along
`fsdp` on their largest dimension, and its output along the batch axes, which makes
the compiler all-gather a block's weights just before it runs and reduce-scatter its
gradients after. Parameters outside any wrapped block (embeddings, heads, a plain MLP)
are sharded the same way at the root. Three things we add around it:
- the wrapper's `_orig_module.` level is kept out of `state_dict()` keys (and put back on
  load), so checkpoints of every strategy share one key set and reshard freely;
- gradients get their parameter's sharding right after backward, so they are
  reduce-scattered and never held whole (also when accumulated across steps);
- a parameter shared by two modules (a tied `lm_head`) is sharded once: FSDPv2 skips a
  tensor that already has a sharding.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from torch import nn

from trainer.errors import UserError
from trainer.parallel.mesh import AXES, BATCH_AXES, FSDP, MeshShape, ParallelPlan

log = logging.getLogger(__name__)

_WRAPPED = "_orig_module."  # the attribute FSDPv2 keeps the wrapped module under


def build_mesh(shape: MeshShape, available: int) -> Any:
    """The torch_xla mesh over every device; extra hosts multiply the data axis (DCN)."""
    import torch_xla.distributed.spmd as xs

    hosts = available // shape.devices
    assert hosts * shape.devices == available, (shape, available)
    sizes = (shape.sizes[0] * hosts,) + shape.sizes[1:]
    mesh = xs.Mesh(np.arange(available), sizes, AXES)
    xs.set_global_mesh(mesh)
    return mesh


def batch_partition(rank: int) -> tuple:
    """A batch tensor's partition spec: dim 0 over every batch axis, the rest replicated."""
    return (BATCH_AXES,) + (None,) * (rank - 1)


def batch_sharding(mesh: Any, rank: int, minibatch: bool) -> Any:
    """The ShardingSpec torch_xla's data transfer applies to a batch tensor of this rank."""
    import torch_xla.distributed.spmd as xs

    return xs.ShardingSpec(mesh, batch_partition(rank), minibatch=minibatch)


def sharding_of(tensor: torch.Tensor) -> str:
    """torch_xla's sharding annotation of a device tensor ("" or "{replicated}" when whole)."""
    import torch_xla

    return torch_xla._XLAC._get_xla_sharding_spec(tensor)


def prepare_module(module: nn.Module, plan: ParallelPlan, mesh: Any, fsdp_wrap: Iterable[str],
                   activation_checkpointing: Iterable[str]) -> nn.Module:
    """Apply activation checkpointing, then (strategy fsdp) shard the module in place.

    Call after the module is on the device and its shared weights are re-tied.
    Returns the same module object: the user's reference stays valid.
    """
    checkpointed = _select_classes(module, activation_checkpointing, "parallel.activation_checkpointing")
    if checkpointed:
        from torch_xla.distributed.fsdp import checkpoint_module

        count = 0
        for sub in module.modules():
            if type(sub) in checkpointed:
                checkpoint_module(sub)  # replaces forward in place; the module keeps its type and names
                count += 1
        log.info("activation checkpointing: %d module(s) of %s", count, _names(checkpointed))
    if plan.fully_sharded:
        _shard_fully(module, mesh, fsdp_wrap)
    return module


@contextlib.contextmanager
def creating_on_device(device: Any, mesh: Any, fully_sharded: bool) -> Iterator[None]:
    """Layers built inside (a module's configure_model) are created on the XLA device, never whole on
    the host; under FSDP each parameter gets its shard spec the moment it is registered, before its
    initialisation runs, so the device computes only its shard of every layer."""
    handle = None
    if fully_sharded:
        import torch_xla.distributed.spmd as xs

        def shard(module: nn.Module, name: str, param: Any) -> None:
            if param is not None and param.device.type == "xla" and param.dim() and sharding_of(param) == "":
                xs.mark_sharding(param, mesh, _parameter_partition(param))

        handle = nn.modules.module.register_module_parameter_registration_hook(shard)
    try:
        with torch.device(device):
            yield
    finally:
        if handle is not None:
            handle.remove()


def shard_gradients(module: nn.Module) -> None:
    """Give each gradient its parameter's sharding (call between backward and the optimizer step)."""
    import torch_xla

    for param in module.parameters():
        if param.grad is not None:
            sharding = torch_xla._XLAC._get_xla_op_sharding(param)
            if sharding:
                torch_xla._XLAC._xla_mark_sharding(param.grad, sharding)


def shard_optimizer_state(optimizer: Any) -> None:
    """Give optimizer state the sharding of its parameter (after a load placed it whole on each device)."""
    import torch_xla

    for param, state in optimizer.state.items():
        sharding = torch_xla._XLAC._get_xla_op_sharding(param)
        if not sharding:
            continue
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.shape == param.shape and sharding_of(value) != sharding_of(param):
                torch_xla._XLAC._xla_mark_sharding(value, sharding)


def checkpoint_save_planner() -> Any:
    """torch.distributed.checkpoint planner that writes each device's local shards.

    torch 2.9 passes `storage_meta` to `set_up_planner` and warns on every save when a
    planner's signature lacks it, as torch_xla 2.9's SPMDSavePlanner's does; this subclass
    has the full signature and hands the rest to torch_xla's (which has no use for it)."""
    from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

    class SavePlanner(SPMDSavePlanner):
        def set_up_planner(self, state_dict: Any, storage_meta: Any = None, is_coordinator: bool = False) -> None:
            super().set_up_planner(state_dict, is_coordinator)

    return SavePlanner()


def checkpoint_load_planner(spmd: bool) -> Any:
    """Fills sharded (SPMD) tensors shard by shard; None (torch's default) for one device."""
    if not spmd:
        return None
    from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner

    return SPMDLoadPlanner()


def prime_optimizer(optimizer: Any) -> None:
    """Create the optimizer's state (a zero-gradient step) so a checkpoint can load into it in place."""
    from torch_xla.experimental.distributed_checkpoint.util import prime_optimizer as prime

    if not optimizer.state:
        prime(optimizer)


def _shard_fully(module: nn.Module, mesh: Any, fsdp_wrap: Iterable[str]) -> None:
    from torch_xla.distributed.fsdp.wrap import recursive_wrap, transformer_auto_wrap_policy
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel

    blocks = _select_classes(module, fsdp_wrap, "parallel.fsdp_wrap") if fsdp_wrap else default_blocks(module)
    wrapped = 0
    if blocks:
        def wrapper(child: nn.Module, **kwargs: Any) -> nn.Module:
            nonlocal wrapped
            wrapped += 1
            fsdp = SpmdFullyShardedDataParallel(child, mesh=mesh, shard_output=_shard_block_output)
            fsdp.register_state_dict_post_hook(_drop_wrapper_keys)
            fsdp.register_load_state_dict_pre_hook(_add_wrapper_keys)
            return fsdp

        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=blocks)
        recursive_wrap(module, auto_wrap_policy=policy, wrapper_cls=wrapper, ignored_modules=set(),
                       ignored_params=set(), only_wrap_children=True)
    import torch_xla.distributed.spmd as xs

    rest = 0
    for param in module.parameters():  # what no block owns: embeddings, heads, a plain MLP
        if sharding_of(param) == "":
            xs.mark_sharding(param, mesh, _parameter_partition(param))
            rest += 1
    log.info("FSDP: %d block(s) of %s wrapped, %d other parameter(s) sharded at the root, over fsdp=%d",
             wrapped, _names(blocks) or "no class", rest, mesh.mesh_shape[AXES.index(FSDP)])


def _parameter_partition(param: torch.Tensor) -> tuple:
    """FSDPv2's rule: the largest dimension along fsdp, the rest replicated; scalars replicated."""
    spec: list = [None] * param.dim()
    if spec:
        spec[int(np.argmax(param.shape))] = FSDP
    return tuple(spec)


def _shard_block_output(output: Any, mesh: Any) -> None:
    """Shard a block's activation over the batch axes (its first tensor: HF blocks return tuples)."""
    import torch_xla.distributed.spmd as xs

    first = output
    while isinstance(first, (tuple, list)) and first:
        first = first[0]
    if isinstance(first, torch.Tensor) and first.dim() > 0:
        xs.mark_sharding(first, mesh, batch_partition(first.dim()))


def default_blocks(module: nn.Module) -> set[type]:
    """The classes FSDP wraps when the user names none: the model's repeated blocks.

    Hugging Face models list theirs in `_no_split_modules` (what HF's own FSDP uses); else
    the class shared by every item of an `nn.ModuleList` (transformer layers); else none,
    and every parameter is sharded at the root.
    """
    named: set[str] = set()
    for sub in module.modules():
        named.update(getattr(sub, "_no_split_modules", None) or ())
    if named:
        return {type(sub) for sub in module.modules() if type(sub).__name__ in named}
    found: set[type] = set()
    for sub in module.modules():
        if isinstance(sub, nn.ModuleList) and len(sub) and len({type(item) for item in sub}) == 1:
            item_type = type(sub[0])
            if any(True for _ in sub[0].parameters()):
                found.add(item_type)
    return found


def _select_classes(module: nn.Module, names: Iterable[str], key: str) -> set[type]:
    """The module classes named by the user (class name or dotted path); unknown names refused."""
    names = list(names)
    if not names:
        return set()
    present = {}
    for sub in module.modules():
        cls = type(sub)
        present.setdefault(cls.__name__, cls)
        present.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
    missing = [n for n in names if n not in present]
    if missing:
        classes = sorted({type(sub).__name__ for sub in module.modules()})
        raise UserError(
            f"{key} names {', '.join(missing)}, but the model has no module of that class. Its module classes "
            f"are: {', '.join(classes)}. Fix: name one of those (e.g. the transformer block's class)."
        )
    return {present[n] for n in names}


def _names(classes: set[type]) -> str:
    return ", ".join(sorted(c.__name__ for c in classes))


def _drop_wrapper_keys(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    inner = prefix + _WRAPPED
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)


def _add_wrapper_keys(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + _WRAPPED)]:
        state_dict[prefix + _WRAPPED + key[len(prefix):]] = state_dict.pop(key)
