"""`Trainer(...)` keywords: ours, and Lightning's spellings for what we support.

People arrive from Lightning with `Trainer(accelerator="tpu", devices=8, max_steps=1000,
accumulate_grad_batches=4, gradient_clip_val=1.0, enable_progress_bar=False, ...)`.
Each keyword lands in one config section; the keywords and Lightning's renamings are those
of `trainer.settings`' table. A Lightning option we do not support is named as such (never
silently ignored), and a typo gets the nearest spelling. Imports no torch.
"""
from __future__ import annotations

import difflib
import logging
from typing import Any

from trainer.errors import UserError
from trainer.parallel.mesh import DATA_PARALLEL, FULLY_SHARDED
from trainer.settings import SECTIONS as SECTION_NAMES
from trainer.settings import SETTINGS

log = logging.getLogger(__name__)

SECTIONS = {section: {s.keyword for s in SETTINGS if s.section == section} for section in SECTION_NAMES}
RENAMED = {alias: s.name for s in SETTINGS for alias in s.lightning}  # Lightning's name -> ours
ACCELERATORS = {"auto": "auto", "xla": "auto", "tpu": "tpu-vm"}
LIGHTNING_STRATEGIES = {"auto": DATA_PARALLEL, "xla": DATA_PARALLEL, "ddp": DATA_PARALLEL,
                        "xla_fsdp": FULLY_SHARDED, "fsdp": FULLY_SHARDED}
UNSUPPORTED = {  # Lightning Trainer options tpu-trainer does not offer, with what to do instead
    "callbacks": "override the TrainModule hooks (on_fit_start, on_train_epoch_start, ...) instead",
    "logger": "metrics go to RUN_DIR/metrics.csv, steps.csv and TensorBoard (RUN_DIR/tb)",
    "num_nodes": "multi-host runs are launched with `invoke pod`; each host runs the same command",
    "gradient_clip_algorithm": "clipping is by global norm (gradient_clip_val)",
    "limit_train_batches": "pass a smaller DataLoader (e.g. a Subset)",
    "limit_val_batches": "pass a smaller DataLoader (e.g. a Subset)",
    "fast_dev_run": "use max_steps=1",
    "overfit_batches": "pass a DataLoader of the batches to overfit",
    "min_steps": "use max_steps", "max_time": "use max_steps",
    "profiler": "use profile_steps (--profile-steps)",
    "detect_anomaly": "use debug=True (torch_xla's metrics and compile causes)",
    "plugins": "precision, strategy and mesh are options",
    "reload_dataloaders_every_n_epochs": "not offered", "enable_model_summary": "not offered",
    "inference_mode": "validation runs under torch.no_grad", "use_distributed_sampler": "sharding across "
    "hosts is automatic", "barebones": "not offered", "num_processes": "use devices", "tpu_cores": "use devices",
    "gpus": "tpu-trainer trains on XLA devices (TPU, or CPU-emulated XLA)",
}

NOTHING_TO_DO = {  # Lightning options that change nothing on XLA: accepted, with the reason logged once
    "deterministic": "an XLA program is deterministic on its device: the same seed gives bitwise-equal losses "
                     "without torch.use_deterministic_algorithms",
    "benchmark": "cudnn.benchmark has no XLA counterpart: XLA compiles its own kernels for each graph",
    "sync_batchnorm": "one SPMD program sees the whole global batch, so BatchNorm's statistics already span "
                      "every device's rows",
    "min_epochs": "nothing here stops a fit before max_epochs or max_steps (there is no early stopping yet)",
}


def split_options(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Sort Trainer keywords into config sections ({"trainer": {...}, "parallel": {...}, ...})."""
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, value in options.items():
        if key in NOTHING_TO_DO:
            if value not in (None, False):
                log.info("Trainer(%s=%r): nothing changes, %s", key, value, NOTHING_TO_DO[key])
            continue
        if key == "num_sanity_val_steps":
            _sanity_steps(value)
            continue
        if key == "accelerator":
            sections["trainer"]["env_profile"] = _accelerator(value)
            continue
        if key == "strategy" and value in LIGHTNING_STRATEGIES:
            if value != LIGHTNING_STRATEGIES[value]:
                log.info("strategy=%r means strategy=%r here (SPMD on XLA)", value, LIGHTNING_STRATEGIES[value])
            value = LIGHTNING_STRATEGIES[value]
        if key == "gradient_clip_val" and value is None:
            value = 0.0  # Lightning's default: no clipping
        key = RENAMED.get(key, key)
        section = next((name for name, keys in SECTIONS.items() if key in keys), None)
        if section is None:
            raise _unknown(key)
        sections[section][key] = value
    return sections


def _sanity_steps(value: Any) -> None:
    """Lightning's pre-training validation pass: the engine has none, which is what 0 asks for."""
    if value != 0:
        raise UserError(
            f"num_sanity_val_steps={value!r}: tpu-trainer runs no validation batches before training (Lightning's "
            "sanity check); validation runs at each epoch's end and every val_check_interval, and a broken "
            "validation_step fails at the first one. Allowed: 0. Fix: num_sanity_val_steps=0, or remove it.")


def _accelerator(value: Any) -> str:
    if value in ACCELERATORS:
        return ACCELERATORS[value]
    raise UserError(
        f"accelerator={value!r} is not supported: tpu-trainer trains on XLA devices. Allowed: 'tpu' (a TPU host; "
        "refused elsewhere), 'xla' or 'auto' (a TPU when the host has one, else CPU-emulated XLA). Fix: "
        "Trainer(accelerator='auto')."
    )


def _unknown(key: str) -> UserError:
    if key in UNSUPPORTED:
        return UserError(f"Trainer({key}=...) is a Lightning option that tpu-trainer does not support: "
                         f"{UNSUPPORTED[key]}. Fix: remove it.")
    known = sorted(set(RENAMED).union(*SECTIONS.values()))
    close = difflib.get_close_matches(key, known + sorted(UNSUPPORTED), n=1)
    hint = f" Did you mean {close[0]}?" if close else ""
    return UserError(f"Trainer() got an unknown option {key!r}.{hint} Options: {', '.join(known)}.")
