"""Is this machine a TPU host, how many XLA devices does it have, how many workers has a slice.

The one home of TPU detection: the engine (profile choice, device count), `invoke run`
(TPU container flags) and `tpu-clean` (which processes hold the TPU) all ask this module,
so they cannot disagree about what counts as a TPU.

Standard library only, and nothing from the project: `invoke tpu-clean --tpu NAME` ships
this file's source to every worker together with tooling/pod/tpu_clean.py and runs both with
the worker's `python3 -c`, where tpu-trainer is not installed.

What a device file is: v2-v4 chips appear as /dev/accel<N>; v5e, v5p and v6e chips as
VFIO groups /dev/vfio/<N>. /dev/vfio/vfio is VFIO's control node, present on any host with
the vfio driver loaded (a VM host passing a GPU through, too); alone it is not a TPU.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Mapping

# trainer/runtime/env_vars.py names every variable; this file cannot import it on a worker, so the
# two it reads are spelled here (tests/test_tpu_host.py checks they still match).
PJRT_DEVICE = "PJRT_DEVICE"
TPU_ACCELERATOR_TYPE = "TPU_ACCELERATOR_TYPE"

#: Device files of TPU chips, relative to the file-system root (one file per chip).
DEVICE_PATTERNS = ("dev/accel*", "dev/vfio/[0-9]*")


def device_globs(root: str = "/") -> tuple[str, ...]:
    """The absolute glob patterns of TPU device files under `root` (a fake /dev in tests)."""
    return tuple(os.path.join(root, pattern) for pattern in DEVICE_PATTERNS)


def tpu_device_files(root: str = "/") -> list[str]:
    return sorted(f for pattern in device_globs(root) for f in glob.glob(pattern))


def has_tpu_devices(root: str = "/") -> bool:
    """Whether TPU chips are attached here (what a container needs to be given)."""
    return bool(tpu_device_files(root))


@dataclass(frozen=True)
class Generation:
    """How one TPU generation names and lays out its slices (Google's Cloud TPU docs)."""

    prefix: str
    """The accelerator type's prefix: v4 in v4-32, v5litepod in v5litepod-16."""
    size_counts_cores: bool
    """v2, v3, v4 and v5p count TensorCores in the type's size (v4-8 is 4 chips); v5e and
    v6e count chips (v6e-8 is 8 chips)."""
    cores_per_chip: int
    devices_per_chip: int
    """PJRT devices per chip: 2 on v2/v3 (one per TensorCore), 1 where a chip's cores act
    as one device (v4 and v5p megacore) or it has one core."""
    chips_per_worker: int
    """Chips on each VM (worker) of a multi-host slice."""
    single_host_chips: int
    """The largest slice that is one VM; larger slices have `chips_per_worker` per VM."""
    chip_counts: tuple[int, ...] = ()
    """Every slice size in chips, where the docs list them all (v5e, v6e); () = any multiple."""


GENERATIONS = {
    g.prefix: g
    for g in (
        Generation("v2", True, 2, 2, 4, 4),
        Generation("v3", True, 2, 2, 4, 4),
        Generation("v4", True, 2, 1, 4, 4),
        Generation("v5p", True, 2, 1, 4, 4),
        # v5e and v6e: 8-chip VMs only as single-host slices; 2-D tori of 1 to 256 chips.
        Generation("v5litepod", False, 1, 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256)),
        Generation("v6e", False, 1, 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256)),
    )
}
_TYPE = re.compile(r"(?P<prefix>[a-z][a-z0-9]*)-(?P<size>\d+)")


class AcceleratorTypeError(ValueError):
    """An accelerator type this module cannot size; the message says what is allowed."""


@dataclass(frozen=True)
class AcceleratorType:
    """A slice type such as v4-32: its chips, its workers (VMs) and each worker's devices."""

    text: str
    generation: Generation
    size: int

    @property
    def chips(self) -> int:
        return self.size // self.generation.cores_per_chip if self.generation.size_counts_cores else self.size

    @property
    def workers(self) -> int:
        g = self.generation
        return 1 if self.chips <= g.single_host_chips else self.chips // g.chips_per_worker

    @property
    def chips_per_worker(self) -> int:
        return self.chips if self.workers == 1 else self.generation.chips_per_worker

    @property
    def devices_per_worker(self) -> int:
        return self.chips_per_worker * self.generation.devices_per_chip


def parse_accelerator_type(text: str) -> AcceleratorType:
    """`v4-32` -> 16 chips on 4 workers; raise AcceleratorTypeError for anything else."""
    match = _TYPE.fullmatch(text.strip().lower())
    known = ", ".join(f"{p}-N" for p in GENERATIONS)
    if match is None or match["prefix"] not in GENERATIONS:
        raise AcceleratorTypeError(
            f"{text!r} is not an accelerator type this launcher knows; known types are {known} "
            "(as `gcloud compute tpus tpu-vm describe` shows them, e.g. v4-32 or v5litepod-16)."
        )
    g, size = GENERATIONS[match["prefix"]], int(match["size"])
    accelerator = AcceleratorType(text, g, size)
    chips = accelerator.chips
    multi_host = chips > g.single_host_chips
    if (
        size == 0
        or size % g.cores_per_chip
        or (multi_host and chips % g.chips_per_worker)
        or (g.chip_counts and chips not in g.chip_counts)
    ):
        per_chip = g.cores_per_chip if g.size_counts_cores else 1
        unit = f"TensorCores ({per_chip} per chip)" if g.size_counts_cores else "chips"
        sizes = f" ({', '.join(str(n * per_chip) for n in g.chip_counts)})" if g.chip_counts else ""
        raise AcceleratorTypeError(
            f"{text!r} is not a slice Cloud TPU makes: {g.prefix}-N counts {unit}{sizes}, and a "
            f"slice larger than one VM ({g.single_host_chips} chips) has {g.chips_per_worker} "
            f"chips on each VM; e.g. {g.prefix}-{4 * g.chips_per_worker * per_chip}."
        )
    return accelerator


def tpu_host_devices(environ: Mapping[str, str] = os.environ, root: str = "/") -> int:
    """XLA devices of this TPU host: chips, times two on v2/v3 (one device per TensorCore).

    Without device files (a container not given them), the accelerator type says it; an
    unknown type gives 0 rather than a guess.
    """
    chips = len(tpu_device_files(root))
    accelerator = environ.get(TPU_ACCELERATOR_TYPE, "")
    if chips == 0:
        try:
            return parse_accelerator_type(accelerator).devices_per_worker
        except AcceleratorTypeError:
            return 0
    generation = GENERATIONS.get(accelerator.split("-")[0])
    return chips * (generation.devices_per_chip if generation else 1)


def default_profile_name(environ: Mapping[str, str] = os.environ, root: str = "/") -> tuple[str, str]:
    """`tpu-vm` when this host has a TPU, else `cpu`; with the reason, for the log line."""
    files = tpu_device_files(root)
    if files:
        return "tpu-vm", f"TPU device files found ({', '.join(files[:2])}...)"
    if environ.get(PJRT_DEVICE) == "TPU":  # asked for explicitly: never fall back to the CPU
        return "tpu-vm", f"{PJRT_DEVICE}=TPU is set"
    if environ.get(TPU_ACCELERATOR_TYPE):
        return "tpu-vm", f"{TPU_ACCELERATOR_TYPE}={environ[TPU_ACCELERATOR_TYPE]}"
    return "cpu", "no TPU found on this host (no /dev/accel*, no /dev/vfio/<N>)"
