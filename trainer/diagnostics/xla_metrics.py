"""torch_xla's debug metrics as plain numbers: take a snapshot, diff two, summarise, save the report.

Two speeds, on purpose. `snapshot()` reads every counter and a few metrics (well under a
millisecond, but `metric_data` copies up to 1,024 samples per metric): call it at run and
epoch boundaries only. The `*_count()` readers are single C++ counter look-ups (about
0.3 us): the only calls that belong on the per-step path.

Names, as torch_xla 2.9 spells them: the metric `CompileTime` (one sample per XLA
compilation), `ExecuteTime` (one device) / `ExecuteReplicatedTime` (SPMD),
`TransferToDeviceTime` / `TransferFromDeviceTime`; the counter `xla::_to_cpu` (every
device-to-host copy at the ATen level: `.cpu()`, `.item()`, a CPU fallback's inputs);
counters named `aten::*` are ops torch_xla ran on the CPU instead of the device, except
`aten::_local_scalar_dense`, which is `.item()`/`bool(tensor)`: a host read, not a
missing lowering. `PersistentCache*` counters describe the on-disk compilation cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping

from trainer.runtime import backend

SCALAR_READ_OP = "aten::_local_scalar_dense"
_HOST_READ_COUNTER = "xla::_to_cpu"
_NS = 1e-9

compile_count = backend.compile_count  # one definition: the loop counts compilations per epoch with it too


def host_read_count() -> int:
    """Device-to-host copies so far (one counter look-up)."""
    import torch_xla.debug.metrics as met

    return met.counter_value(_HOST_READ_COUNTER) or 0


def scalar_read_count() -> int:
    """`.item()` / `bool(tensor)` calls so far (one counter look-up)."""
    import torch_xla.debug.metrics as met

    return met.counter_value(SCALAR_READ_OP) or 0


@dataclass(frozen=True)
class MetricsSnapshot:
    """Cumulative figures at one moment; `later - earlier` gives what happened in between."""

    compiles: int = 0
    compile_seconds: float = 0.0
    executions: int = 0
    execute_seconds: float = 0.0
    """Time the device itself spent executing graphs (ExecuteTime + ExecuteReplicatedTime)."""
    to_device: int = 0
    from_device: int = 0
    host_reads: int = 0
    aten: Mapping[str, int] = field(default_factory=dict)
    """Every `aten::*` counter: CPU fallbacks, plus `aten::_local_scalar_dense` (host reads)."""
    cache: Mapping[str, int] = field(default_factory=dict)
    """PersistentCacheHit / Miss / DeserializeFailure ..., as torch_xla counts them."""

    def __sub__(self, earlier: "MetricsSnapshot") -> "MetricsSnapshot":
        values = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(earlier, f.name)
            if isinstance(mine, Mapping):
                diff = {k: v - theirs.get(k, 0) for k, v in mine.items()}
                values[f.name] = {k: v for k, v in diff.items() if v}
            else:
                values[f.name] = mine - theirs
        return MetricsSnapshot(**values)

    @property
    def fallback_ops(self) -> dict[str, int]:
        """Ops that ran on the CPU, by name (without the `aten::` prefix), most frequent first."""
        ops = {k.removeprefix("aten::"): v for k, v in self.aten.items() if k != SCALAR_READ_OP}
        return dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def scalar_reads(self) -> int:
        return self.aten.get(SCALAR_READ_OP, 0)


def snapshot() -> MetricsSnapshot:
    """Read torch_xla's counters and metrics now (not for the per-step path)."""
    import torch_xla.debug.metrics as met

    names = set(met.metric_names())

    def metric(name: str) -> tuple[int, float]:
        if name not in names:
            return 0, 0.0
        count, total, _ = met.metric_data(name)
        return int(count), float(total)

    compiles, compile_ns = metric("CompileTime")
    single, single_ns = metric("ExecuteTime")
    replicated, replicated_ns = metric("ExecuteReplicatedTime")
    counters = {name: met.counter_value(name) or 0 for name in met.counter_names()}
    return MetricsSnapshot(
        compiles=compiles, compile_seconds=compile_ns * _NS,
        executions=single + replicated, execute_seconds=(single_ns + replicated_ns) * _NS,
        to_device=metric("TransferToDeviceTime")[0], from_device=metric("TransferFromDeviceTime")[0],
        host_reads=counters.get(_HOST_READ_COUNTER, 0),
        aten={k: v for k, v in counters.items() if k.startswith("aten::")},
        cache={k: v for k, v in counters.items() if k.startswith("PersistentCache")},
    )


def summary_lines(delta: MetricsSnapshot) -> list[str]:
    """A short human summary of a run (or any window): what the XLA runtime did."""
    lines = [
        f"XLA compilations: {delta.compiles} ({delta.compile_seconds:.2f} s compiling)",
        f"graph executions: {delta.executions} ({delta.execute_seconds:.2f} s on the device)",
        f"host->device transfers: {delta.to_device}; device->host transfers: {delta.from_device} "
        f"(.item()/bool() reads: {delta.scalar_reads})",
    ]
    fallbacks = delta.fallback_ops
    if fallbacks:
        listed = ", ".join(f"{name} x{count}" for name, count in fallbacks.items())
        lines.append(f"ops that fell back to the CPU (each is a device->host->device round trip): {listed}")
    else:
        lines.append("ops that fell back to the CPU: none")
    return lines


def write_report(path: Path) -> Path:
    """torch_xla's full metrics report (every counter and metric with percentiles) into `path`."""
    import torch_xla.debug.metrics as met

    path.write_text(met.metrics_report())
    return path
