"""The persistent compilation cache: use it where the backend can reload executables.

torch_xla's `runtime.initialize_cache(path)` stores each compiled executable on disk and
reloads it in the next run, saving the first steps' compilations; the directory can be
mounted into the image and onto pod workers. It only helps if the PJRT backend can
deserialize executables. PJRT CPU in torch_xla 2.9 cannot: every reload logs "Failed to
deserialize executable: UNIMPLEMENTED" once per graph and compiles anyway (counter
`PersistentCacheDeserializeFailure`), so on CPU we switch the cache off and say so once.
On TPU it is used; pytorch/xla#9094 reports reload failures there too, which the run
summary's hit/miss/failure counts make visible.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

log = logging.getLogger(__name__)

# PJRT device types whose executables cannot be reloaded, with the reason, by torch_xla release.
_CANNOT_DESERIALIZE = {
    ("CPU", "2.9"): "PJRT CPU in torch_xla 2.9 cannot deserialize executables (UNIMPLEMENTED): "
                    "every cached graph would be compiled again, with a warning per graph",
}


@dataclass(frozen=True)
class CacheDecision:
    enabled: bool
    path: str
    reason: str

    def describe(self) -> str:
        if not self.path:
            return "persistent compilation cache: off (no --compile-cache directory given)"
        state = f"on, in {self.path}" if self.enabled else f"off (asked for {self.path})"
        return f"persistent compilation cache: {state}: {self.reason}"


def decide(cache_dir: str, pjrt_device: str, xla_version: str) -> CacheDecision:
    """Whether to use `cache_dir` on this backend; pure, so it is testable without XLA."""
    if not cache_dir:
        return CacheDecision(False, "", "not requested")
    release = ".".join(xla_version.split("+")[0].split(".")[:2])
    why_not = _CANNOT_DESERIALIZE.get((pjrt_device.upper(), release))
    if why_not:
        return CacheDecision(False, cache_dir, why_not + "; the cache is switched off for this run")
    return CacheDecision(True, cache_dir, f"{pjrt_device} can reload compiled executables")


def apply(decision: CacheDecision, readonly: bool = False) -> None:
    """Initialise torch_xla's cache (before any computation) and log the decision once."""
    if decision.enabled:
        import torch_xla.runtime as xr

        Path(decision.path).mkdir(parents=True, exist_ok=True)
        xr.initialize_cache(decision.path, readonly=readonly)
    (log.info if decision.enabled or not decision.path else log.warning)(decision.describe())


def cache_counts(cache_counters: Mapping[str, int]) -> dict[str, int]:
    """hits / misses / failures from torch_xla's PersistentCache* counters (a snapshot diff)."""
    return {
        "compile_cache_hits": cache_counters.get("PersistentCacheHit", 0),
        "compile_cache_misses": cache_counters.get("PersistentCacheMiss", 0),
        "compile_cache_failures": sum(v for k, v in cache_counters.items()
                                      if k.startswith("PersistentCache") and "Fail" in k),
    }
