"""The torch_xla calls the training loop, data path and checkpoints make, in one place.

torch_xla 2.9 is its last release; a successor backend replaces this module (and
`trainer.parallel.sharding`, `trainer.runtime.startup.start_xla`), not the loop. Each function
is a thin, named wrapper, imported lazily so that importing the engine costs nothing.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence


def sync() -> None:
    """Cut the traced graph here and run it (one per step: every step replays one graph)."""
    import torch_xla

    torch_xla.sync()


def wait_device_ops() -> None:
    """Block until the device has finished everything queued (before reading state to save it)."""
    import torch_xla.core.xla_model as xm

    xm.wait_device_ops()


def compile_count() -> int:
    """XLA compilations so far in this process (torch_xla's CompileTime metric)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def after_step(fn: Callable[..., None], args: Sequence[Any]) -> None:
    """Run `fn(*args)` once the current step's graph has executed, on a background thread.

    The device values in `args` are read there, so the host never waits in the loop.
    """
    import torch_xla.core.xla_model as xm

    xm.add_step_closure(fn, args=tuple(args), run_async=True)


def rng_seed(device: Any) -> int:
    """The device generator's seed; exact at a step boundary, where a sync has just reset it."""
    import torch_xla.core.xla_model as xm

    return int(xm.get_rng_state(device))


def set_rng_seed(seed: int, device: Any) -> None:
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(seed, device=device)


def send_to_device(tensors: list, device: Any, sharding: Any | None) -> list:
    """Copy host tensors to the device in one transfer, with an optional SPMD sharding."""
    import torch_xla.core.xla_model as xm

    return xm.send_cpu_data_to_device(tensors, device, sharding)


def to_host(tensors: list) -> list:
    """Copy device tensors to the host in one transfer (device data: no graph is compiled)."""
    if not tensors:
        return []
    import torch_xla

    return torch_xla._XLAC._xla_get_cpu_tensors(tensors)


@contextmanager
def distinct_scalars() -> Iterator[None]:
    """Inside: each Python number an op takes becomes its own device data, never shared by value.

    torch_xla reuses one device buffer for equal numbers (its device-data cache), and a graph
    takes one input per buffer: when a number that changes every step (a learning rate, a
    bias correction) becomes equal to another number of the graph (1.0, beta2), two inputs
    merge into one and XLA compiles a new graph. Without the cache the inputs never merge.
    """
    import torch_xla

    xlac = torch_xla._XLAC
    previous = xlac._get_xla_enable_device_data_cache()
    xlac._set_xla_enable_device_data_cache(False)
    try:
        yield
    finally:
        xlac._set_xla_enable_device_data_cache(previous)
