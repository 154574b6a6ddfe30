"""Typed job configuration, composed in layers and validated once, at the edge.

Layers, later wins: the dataclass defaults, a job YAML (`--config`), then CLI overrides
(`--devices`, `--set trainer.max_epochs=5`, ...). Every key is checked: an unknown or
mistyped key is a `UserError` naming the dotted key, the value given and what is allowed.
Imports no torch, so a bad value is refused in milliseconds. A section that belongs to one
part of the engine lives there (`trainer.data.config`, `trainer.diagnostics.config`) and is
composed into `JobConfig` here.
"""
from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from trainer.data.config import DataConfig
from trainer.diagnostics.config import DiagnosticsConfig
from trainer.errors import UserError, require
from trainer.parallel.mesh import DATA_PARALLEL
from trainer.precision import canonical_precision

LAST_BATCH_CHOICES = ("pad", "drop")
DEFAULT_MODULE = "trainer.examples.digits:DigitsClassifier"


@dataclass(frozen=True)
class TrainerConfig:
    """How the engine trains: devices, precision, length, logging."""

    devices: Any = 1
    """1, the host's device count, "auto", or one device index as a list ([5]). CLI: --devices (alias --cores)."""
    precision: str = "fp32"
    """fp32, bf16 (mixed), bf16-true, or Lightning's 32/16/bf16-mixed/... spellings."""
    max_epochs: int = 15
    """Passes over the training data."""
    max_steps: int = -1
    """Stop after this many optimizer steps, mid-epoch if need be, with a final checkpoint (-1: no limit)."""
    accumulate_grad_batches: int = 1
    """Batches whose gradients are summed before one optimizer step (a window's loss is the mean over
    its real rows, as one batch of the whole window would give). Steps, schedules, logs and checkpoints
    count optimizer steps."""
    gradient_clip_val: float = 0.0
    """Clip the gradients' global L2 norm to this (0: off); the norm is logged as grad_norm."""
    val_check_interval: Any = 1.0
    """Validate every N optimizer steps (an integer) or every fraction of an epoch (a float in (0, 1]);
    1.0: at each epoch's end only. The epoch's end always validates (in the epochs that
    check_val_every_n_epoch picks)."""
    seed: Any = None
    """An integer: the fit seeds Python, NumPy, torch and the XLA generator at its start. None (the library's
    default): the host RNG is left as the script set it; the XLA generator gets PL_GLOBAL_SEED or
    torch.initial_seed() (`trainer.runtime.seeding`). A job (CLI, job YAML) defaults to 0. CLI: --seed."""
    check_val_every_n_epoch: int = 1
    """Validate in every this many epochs only (Lightning's meaning): at their end and at their
    val_check_interval points; the other epochs do not validate."""
    log_every_n_steps: int = 10
    """Read the loss to the host (asynchronously) every this many steps; never more often."""
    last_batch: str = "pad"
    """A ragged last batch is padded to full size and masked ("pad") or skipped ("drop")."""
    progress_bar: bool = True
    """Show a tqdm bar with loss and throughput."""
    prefetch_batches: int = 2
    """Batches copied to the device ahead of the step that uses them (overlaps compute)."""
    run_dir: str = ""
    """Where outputs go; empty means RUNS_ROOT/<time>-<job name>. Must not already hold a run, unless resuming it."""
    runs_root: str = "runs"
    """Where a run without run_dir gets its directory (Lightning's default_root_dir)."""
    env_profile: str = "auto"
    """Runtime environment profile from env/: cpu, tpu-vm, ...; auto picks tpu-vm on a TPU host."""
    resume: str = ""
    """Empty: start fresh. "auto": continue from the newest valid checkpoint in run_dir (fresh if it
    has none). A path: resume from that checkpoint file (verified against its manifest). CLI: --resume."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", canonical_precision(self.precision, "trainer.precision"))
        require(self.max_epochs >= 1, "trainer.max_epochs", self.max_epochs, "an integer >= 1")
        require(self.seed is None or (type(self.seed) is int and self.seed >= 0), "trainer.seed", self.seed,
                 "an integer >= 0, or null to leave the random state as the script set it")
        require(self.max_steps == -1 or self.max_steps >= 1, "trainer.max_steps", self.max_steps,
                 "an integer >= 1, or -1 for no limit")
        require(type(self.accumulate_grad_batches) is int and self.accumulate_grad_batches >= 1,
                 "trainer.accumulate_grad_batches", self.accumulate_grad_batches, "an integer >= 1")
        require(isinstance(self.gradient_clip_val, (int, float)) and self.gradient_clip_val >= 0,
                 "trainer.gradient_clip_val", self.gradient_clip_val, "a number >= 0 (0 turns clipping off)")
        interval = self.val_check_interval
        require((type(interval) is int and interval >= 1) or (type(interval) is float and 0 < interval <= 1),
                 "trainer.val_check_interval", interval,
                 "an integer >= 1 (every N optimizer steps) or a float in (0, 1] (a fraction of an epoch)")
        require(type(self.check_val_every_n_epoch) is int and self.check_val_every_n_epoch >= 1,
                "trainer.check_val_every_n_epoch", self.check_val_every_n_epoch, "an integer >= 1")
        require(
            self.log_every_n_steps >= 1, "trainer.log_every_n_steps", self.log_every_n_steps,
            "an integer >= 1",
        )
        require(
            self.last_batch in LAST_BATCH_CHOICES, "trainer.last_batch", self.last_batch,
            " or ".join(LAST_BATCH_CHOICES),
        )
        require(self.prefetch_batches >= 1, "trainer.prefetch_batches", self.prefetch_batches, ">= 1")
        require(
            self.resume != "auto" or bool(self.run_dir), "trainer.resume", self.resume,
            "auto together with a run directory (--run-dir / RUN_DIR=...) to look in",
        )
        require(
            not self.resume.startswith("gs://"), "trainer.resume", self.resume,
            "auto or a local checkpoint path; to resume a run in a bucket, pass its directory as "
            "--run-dir gs://BUCKET/PATH (RUN_DIR=...) with --resume auto (RESUME=auto)",
        )


@dataclass(frozen=True)
class CheckpointConfig:
    """When checkpoints are written (RUN_DIR/checkpoints/) and how many are kept."""

    every_n_steps: int = 0
    """Also save after every this many optimizer steps (0: off). Costs one device-to-host copy."""
    every_n_epochs: int = 1
    """Save after every this many epochs (0: off). The last epoch always writes final.ckpt."""
    keep_last: int = 3
    """Periodic checkpoints kept (the newest; final.ckpt is always kept). 0 keeps all."""
    checkpointing: bool = True
    """False (Lightning's enable_checkpointing=False): no checkpoint at all, not even final.ckpt or on
    SIGTERM (the run then cannot be resumed)."""

    def __post_init__(self) -> None:
        for key in ("every_n_steps", "every_n_epochs", "keep_last"):
            value = getattr(self, key)
            require(value >= 0, f"checkpoint.{key}", value, "an integer >= 0 (0 turns it off)")


@dataclass(frozen=True)
class ParallelConfig:
    """How the model and the batch are spread over the devices (one SPMD mesh; see trainer.parallel)."""

    strategy: str = DATA_PARALLEL
    """data: every device holds the whole model, the batch is split (default). fsdp: parameters,
    gradients and optimizer state are also sharded, over the mesh's fsdp axis. CLI: --strategy."""
    mesh: Any = ""
    """Axis sizes, "data:2,fsdp:4" or {data: 2, fsdp: 4}; their product is the device count. Empty: one
    axis over every device (data, or fsdp with strategy fsdp). CLI: --mesh."""
    fsdp_wrap: list = field(default_factory=list)
    """Module class names FSDP shards one at a time (e.g. [GPT2Block]). Empty: the model's repeated
    blocks (Hugging Face's _no_split_modules, else the class of every nn.ModuleList's items)."""
    activation_checkpointing: list = field(default_factory=list)
    """Module class names whose activations are recomputed in the backward pass instead of kept
    (less memory, about a third more compute). Any strategy."""

    def __post_init__(self) -> None:
        for key in ("fsdp_wrap", "activation_checkpointing"):
            names = getattr(self, key)
            require(all(isinstance(n, str) and n for n in names), f"parallel.{key}", names,
                     "a list of module class names, e.g. [GPT2Block]")


@dataclass(frozen=True)
class JobConfig:
    """A whole training job: which module to train, with which arguments, and how."""

    module: str = DEFAULT_MODULE
    """The TrainModule class as "package.module:Class"."""
    module_args: dict = field(default_factory=dict)
    """Keyword arguments for the module's constructor (hyper-parameters, data options)."""
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    data: DataConfig = field(default_factory=DataConfig)

    def __post_init__(self) -> None:
        modname, _, cls = self.module.partition(":")
        require(bool(modname and cls), "module", self.module, 'the form "package.module:Class"')

    @property
    def name(self) -> str:
        """A short job name for run directories: the module's class name."""
        return self.module.rpartition(":")[2]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_job_config(path: str | None = None, overrides: Mapping[str, Any] | None = None) -> JobConfig:
    """Defaults, then the YAML at `path`, then dotted-key `overrides`; validated. A job's seed defaults to 0."""
    data: dict = {}
    if path:
        data = _read_yaml(Path(path))
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    if isinstance(data.get("trainer", {}), dict):  # a job has no other place to seed before its module is built
        data.setdefault("trainer", {}).setdefault("seed", 0)
    return _build(JobConfig, data, prefix="")


def parse_override(text: str) -> tuple[str, Any]:
    """`key.sub=value` from `--set`, the value read as a YAML scalar (8, true, [5], bf16)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise UserError(
            f"--set {text!r} is not of the form dotted.key=value. Fix: e.g. "
            "`--set trainer.max_epochs=5` or `--set module_args.lr=0.01`."
        )
    return key.strip(), parse_scalar(raw)


def parse_scalar(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read the job config {path}: {exc.strerror}. Fix: pass an existing YAML file to --config.") from exc
    except yaml.YAMLError as exc:
        raise UserError(f"the job config {path} is not valid YAML: {exc}. Fix the file and rerun.") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"the job config {path} must be a mapping of keys (module, module_args, trainer), not a {type(data).__name__}.")
    return data


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"cannot set {dotted!r}: {part!r} is not a section. Fix: check the key's spelling.")
    node[leaf] = value


def _build(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, checking keys and scalar types."""
    if not isinstance(data, Mapping):
        raise UserError(f"{prefix.rstrip('.') or 'the config'} must be a mapping, got {data!r}.")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        dotted = prefix + str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" Did you mean {prefix}{close[0]}?" if close else ""
            raise UserError(
                f"unknown config key {dotted!r}.{hint} Allowed keys here: "
                f"{', '.join(prefix + n for n in names)}."
            )
        expected = hints[key]
        if dataclasses.is_dataclass(expected):
            kwargs[key] = _build(expected, value, dotted + ".")
        else:
            kwargs[key] = _check_type(dotted, value, expected)
    return cls(**kwargs)


def _check_type(dotted: str, value: Any, expected: Any) -> Any:
    if expected is Any:
        return value
    if expected is float and type(value) is int:
        return float(value)
    if expected is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    ok = type(value) is expected if expected in (int, bool) else isinstance(value, expected)
    if not ok:
        raise UserError(
            f"config key {dotted!r} got {value!r} ({type(value).__name__}); it must be a "
            f"{expected.__name__}. Fix the value in the job YAML or on the command line."
        )
    return value
