"""TPU detection in one place, on fake /dev trees (run: `pytest tests/test_tpu_host.py`).

Every function takes the file-system root as a parameter, so a temp dir with real files
stands in for /dev: no patching. The engine (profile choice), `invoke run` (container
flags) and `tpu-clean` (device globs) must agree on every tree.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tooling.docker import container
from tooling.pod import tpu_clean
from trainer.runtime import env_vars
from trainer.runtime import startup as runtime
from trainer.runtime import tpu_host

TREES = {
    "no devices": ((), False),
    # VFIO's control node exists wherever the vfio driver is loaded, TPU or not.
    "vfio control node only": (("vfio/vfio",), False),
    "v5e host: vfio groups": (("vfio/vfio", "vfio/0", "vfio/1", "vfio/2", "vfio/3"), True),
    "v4 host: accel chips": (("accel0", "accel1", "accel2", "accel3"), True),
}


def fake_root(tmp_path: Path, files: tuple[str, ...]) -> str:
    (tmp_path / "dev").mkdir()
    for name in files:
        (tmp_path / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / name).write_bytes(b"")
    return str(tmp_path)


@pytest.mark.parametrize("tree", TREES)
def test_engine_container_and_cleaner_agree_on_what_is_a_tpu(tmp_path: Path, tree: str) -> None:
    files, is_tpu = TREES[tree]
    root = fake_root(tmp_path, files)
    assert tpu_host.has_tpu_devices(root) is is_tpu
    assert container.tpu_host(root) is is_tpu
    profile, why = runtime.default_profile_name({}, root)
    assert profile == ("tpu-vm" if is_tpu else "cpu"), why
    assert ("TPU device files found" in why) is is_tpu
    assert len(tpu_host.tpu_device_files(root)) == (4 if is_tpu else 0)
    assert not any(f.endswith("/vfio/vfio") for f in tpu_host.tpu_device_files(root))
    # tpu-clean matches open files against the same patterns.
    assert tpu_clean.DEVICE_GLOBS == tpu_host.device_globs("/")


def test_device_count_from_files_doubles_on_two_core_generations(tmp_path: Path) -> None:
    root = fake_root(tmp_path, ("accel0", "accel1", "accel2", "accel3"))
    assert tpu_host.tpu_host_devices({}, root) == 4
    assert tpu_host.tpu_host_devices({"TPU_ACCELERATOR_TYPE": "v4-32"}, root) == 4
    assert tpu_host.tpu_host_devices({"TPU_ACCELERATOR_TYPE": "v3-8"}, root) == 8


def test_device_count_without_files_comes_from_the_accelerator_type(tmp_path: Path) -> None:
    root = fake_root(tmp_path, ())
    assert tpu_host.tpu_host_devices({"TPU_ACCELERATOR_TYPE": "v6e-8"}, root) == 8
    assert tpu_host.tpu_host_devices({"TPU_ACCELERATOR_TYPE": "v5litepod-16"}, root) == 4
    assert tpu_host.tpu_host_devices({"TPU_ACCELERATOR_TYPE": "no-such-9"}, root) == 0
    assert tpu_host.tpu_host_devices({}, root) == 0


@pytest.mark.parametrize(
    ("accelerator", "chips", "workers", "devices_per_worker"),
    [
        ("v2-8", 4, 1, 8),
        ("v3-32", 16, 4, 8),
        ("v4-8", 4, 1, 4),
        ("v4-32", 16, 4, 4),
        ("v5p-8", 4, 1, 4),
        ("v5p-16", 8, 2, 4),
        ("v5litepod-4", 4, 1, 4),
        ("v5litepod-8", 8, 1, 8),
        ("v5litepod-16", 16, 4, 4),
        ("v5litepod-256", 256, 64, 4),
        ("v6e-8", 8, 1, 8),
        ("v6e-16", 16, 4, 4),
        ("v6e-256", 256, 64, 4),
    ],
)
def test_slice_sizes_follow_googles_tables(accelerator, chips, workers, devices_per_worker) -> None:
    parsed = tpu_host.parse_accelerator_type(accelerator)
    assert (parsed.chips, parsed.workers, parsed.devices_per_worker) == (chips, workers, devices_per_worker)


@pytest.mark.parametrize(
    ("accelerator", "says"),
    [
        ("v9-8", "not an accelerator type this launcher knows"),
        ("v4", "not an accelerator type this launcher knows"),
        ("tpu7x-8", "known types are v2-N"),
        ("v4-0", "not a slice Cloud TPU makes"),
        ("v4-3", "v4-N counts TensorCores"),
        ("v4-12", "4 chips on each VM; e.g. v4-32"),
        ("v6e-20", "v6e-N counts chips"),
    ],
)
def test_unknown_or_impossible_accelerator_types_are_refused(accelerator: str, says: str) -> None:
    with pytest.raises(tpu_host.AcceleratorTypeError, match=says):
        tpu_host.parse_accelerator_type(accelerator)


def test_the_variable_names_it_spells_match_env_vars() -> None:
    assert tpu_host.PJRT_DEVICE == env_vars.PJRT_DEVICE
    assert tpu_host.TPU_ACCELERATOR_TYPE == env_vars.TPU_ACCELERATOR_TYPE


def test_it_imports_only_the_standard_library() -> None:
    # It is shipped to workers where nothing but python3 exists (see test_tpu_clean).
    tree = ast.parse(Path(tpu_host.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= sys.stdlib_module_names | {"__future__"}, imported
