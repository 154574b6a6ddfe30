"""The one table of the engine's settings, and how a user spelled each one.

A setting has one dotted config key (`trainer.devices`) and a name in every front end: its
Python keyword (`Trainer(devices=8)`, plus Lightning's keyword where it differs), its CLI
flags (`--devices`, then aliases: `--cores`), its make variables (the flags in capitals:
`DEVICES`, `CORES`), a help text with units, and the commands it belongs to. The CLI builds
its parsers from `SETTINGS`, `Trainer(...)` its keywords, `tasks.py` and make their options,
and `Spelling` quotes a value back in the name the user typed (`CORES=3`, `--devices 3`).

Standard library only: `make help` reads the table with the system Python, before any venv.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

FRONT_ENDS = ("python", "cli", "make")
SECTIONS = ("trainer", "checkpoint", "parallel", "diagnostics")
"""The config sections whose keys are `Trainer(...)` keywords."""
KINDS = ("text", "int", "float", "yaml", "switch")
"""How a flag's text becomes a value: as is, int, float, a YAML scalar ([5], 0.25), or a flag alone."""


@dataclass(frozen=True)
class Setting:
    """One option, in every spelling. Flags and make variables go name first, then aliases."""

    name: str
    """Python keyword, parser destination, invoke parameter; unique within each command."""
    key: str | None
    """Dotted config key; None for an option of the command itself (`--config`, invoke's `--args`)."""
    help: str
    flags: tuple[str, ...] = ()
    """Default: `--` and the name with dashes. `--` alone: the words after invoke's `--`."""
    make: tuple[str, ...] | None = None
    """Default (None): each flag in capitals, `--max-epochs` -> MAX_EPOCHS; () for none."""
    lightning: tuple[str, ...] = ()
    """Lightning's Trainer keywords for this setting, where they differ from `name`."""
    commands: tuple[str, ...] = ("train",)
    """The commands (CLI or invoke) that take it; names are scoped per command."""
    kind: str = "text"
    switch: Any = True
    """The value a switch flag sets (kind "switch")."""
    metavar: str | None = None
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert self.kind in KINDS, self.kind
        if not self.flags:
            object.__setattr__(self, "flags", ("--" + self.name.replace("_", "-"),))

    @property
    def section(self) -> str | None:
        return self.key.partition(".")[0] if self.key and "." in self.key else None

    @property
    def keyword(self) -> str | None:
        """The `Trainer(...)` keyword, or None when Python code does not pass it there."""
        return self.name if self.section in SECTIONS else None

    @property
    def make_names(self) -> tuple[str, ...]:
        if self.make is not None:
            return self.make
        return tuple(_variable(flag) for flag in self.flags if flag != "--")

    def names(self, front_end: str) -> tuple[str, ...]:
        """Every name this setting has in `front_end`, its own name first."""
        if front_end == "python":
            return (self.keyword or self.name, *self.lightning)
        return self.flags if front_end == "cli" else self.make_names

    def flag_for(self, variable: str) -> str:
        """The flag a make variable stands for: `CORES` -> `--cores`, `EPOCHS` (matrix) -> `--max-epochs`."""
        if self.make is None:
            return next(flag for flag in self.flags if _variable(flag) == variable)
        return self.flags[0]

    def variable_for(self, flag: str) -> str:
        """The make variable of a flag: `--cores` -> `CORES`."""
        return _variable(flag) if self.make is None else self.make_names[0]


def _variable(flag: str) -> str:
    return flag.lstrip("-").upper().replace("-", "_")


def _in(section: str):
    def make(name: str, help: str, **options: Any) -> Setting:
        return Setting(name, f"{section}.{name}", help, **options)

    return make


_trainer, _checkpoint, _parallel, _diagnostics = (_in(s) for s in SECTIONS)
BOTH = ("train", "env")

SETTINGS: tuple[Setting, ...] = (
    Setting("config", None, "job YAML: module, module_args, trainer: {...}", metavar="FILE"),
    Setting("module", "module", 'the TrainModule class, "package.module:Class" (default: the digits MLP)'),
    _trainer("devices", "1 (default), the host's device count (8 on a v3-8 or the cpu profile), auto (all), or "
             "one device as a list: [5]; several devices run one SPMD program", flags=("--devices", "--cores"),
             commands=BOTH, kind="yaml", metavar="N|auto|[I]"),
    _trainer("precision", "fp32 (default), bf16 (autocast), bf16-true (bf16 weights), or Lightning's "
             "32/16-mixed/bf16-mixed..."),
    _trainer("max_epochs", "passes over the training data (default 15)", flags=("--max-epochs", "--epochs"),
             kind="int", metavar="N"),
    _trainer("max_steps", "stop after N optimizer steps (mid-epoch if need be), with a final checkpoint; -1: no "
             "limit (default)", kind="int", metavar="N"),
    _trainer("accumulate_grad_batches", "batches per optimizer step (gradient accumulation; default 1)",
             flags=("--accumulate-grad-batches", "--accumulate"), kind="int", metavar="N"),
    _trainer("gradient_clip_val", "clip the gradients' global L2 norm to this (0: off, default); logs grad_norm",
             flags=("--gradient-clip-val", "--clip"), kind="float", metavar="NORM"),
    _trainer("val_check_interval", "also validate every N optimizer steps (an integer) or fraction of an epoch "
             "(0.25); default 1.0: at each epoch's end", kind="yaml", metavar="N|FRACTION"),
    _trainer("seed", "one seed for Python, NumPy, torch, XLA and the shuffle order (default 0)", kind="int"),
    _trainer("check_val_every_n_epoch", "validate in every N-th epoch only (default 1: every epoch)", kind="int",
             metavar="N"),
    _trainer("log_every_n_steps", "read the loss to the host every N optimizer steps, asynchronously "
             "(default 10)", kind="int", metavar="N"),
    _trainer("last_batch", "pad+mask (default) or drop a ragged last batch", choices=("pad", "drop")),
    _trainer("progress_bar", "no progress bar (logs only)", flags=("--no-progress",), kind="switch", switch=False,
             lightning=("enable_progress_bar",)),
    _trainer("prefetch_batches", "batches copied to the device ahead of the step that uses them (default 2)",
             kind="int", metavar="N"),
    _trainer("run_dir", "output directory, local or gs://BUCKET/PATH (default RUNS_ROOT/<time>-<job>); must be "
             "new or empty, unless resuming", metavar="DIR"),
    _trainer("runs_root", "where a run without a run directory gets one (default runs)", metavar="DIR",
             lightning=("default_root_dir",)),
    _trainer("env_profile", "runtime profile from env/: cpu, tpu-vm, ... (default auto: tpu-vm on a TPU host, "
             "cpu otherwise)", flags=("--env-profile", "--profile"), commands=BOTH, metavar="NAME",
             lightning=("accelerator",)),
    _trainer("resume", "auto: continue from the newest valid checkpoint in the run directory (fresh if none); "
             "PATH: from that checkpoint file. Exit codes after SIGTERM/SIGINT: 143/130", metavar="auto|PATH"),
    _checkpoint("every_n_steps", "also save every N optimizer steps (0: off, default)", kind="int", metavar="N"),
    _checkpoint("checkpointing", "no checkpoints at all, not even final.ckpt (the run cannot be resumed)",
                flags=("--no-checkpoints",), kind="switch", switch=False, lightning=("enable_checkpointing",)),
    _checkpoint("every_n_epochs", "save every N epochs (0: off; default 1); the last epoch always writes "
                "final.ckpt", kind="int", metavar="N"),
    _checkpoint("keep_last", "periodic checkpoints kept besides final.ckpt (0: all; default 3)", kind="int",
                metavar="N"),
    _parallel("strategy", "data (default: every device holds the whole model) or fsdp (parameters, gradients "
              "and optimizer state sharded over the mesh)"),
    _parallel("mesh", "device mesh axis sizes, e.g. data:2,fsdp:4 (product = devices); default: one axis over "
              "every device"),
    _parallel("fsdp_wrap", "module classes FSDP shards one at a time, e.g. [GPT2Block] (default: the repeated "
              "blocks)", kind="yaml", metavar="CLASSES"),
    _parallel("activation_checkpointing", "module classes whose activations are recomputed in the backward "
              "pass (less memory, about a third more compute), e.g. [Block]", kind="yaml", metavar="CLASSES"),
    _diagnostics("debug", "save torch_xla's metrics report and compile/host-read causes into the run directory "
                 "and print a summary (slower; for diagnosis)", kind="switch"),
    _diagnostics("strict_compile", "fail the run (exit 2) when XLA compiles again after the warm-up steps",
                 kind="switch"),
    _diagnostics("warmup_steps", "steps allowed to compile before the recompilation guard speaks (default 3)",
                 kind="int", metavar="N"),
    _diagnostics("profile_steps", "capture an XLA profiler trace of these global steps into RUN_DIR/profile "
                 "(view: tensorboard --logdir RUN_DIR/profile, Profile tab), e.g. 10:20", metavar="FIRST:LAST"),
    _diagnostics("profile_port", "port of the profiler server of a profile window (default 9012)", kind="int",
                 metavar="PORT"),
    _diagnostics("compile_cache", "persistent compilation cache directory (off on PJRT CPU, which cannot reload "
                 "executables)", metavar="DIR"),
    _diagnostics("quiet_xla_logs", "show XLA's GSPMD deprecation warning on every SPMD compilation (default: once)",
                 flags=("--no-quiet-xla-logs",), kind="switch", switch=False),
    Setting("data_path", "data.path", "token shards to train on (`tpu-trainer tokenize` writes them), a directory "
            "or gs://BUCKET/PATH; default: the module's own loaders", flags=("--data",), metavar="DIR"),
    Setting("seq_len", "data.seq_len", "tokens per sequence of the token shards", kind="int", metavar="N"),
    Setting("global_batch_size", "data.global_batch_size", "sequences per micro-step over all hosts and devices",
            kind="int", metavar="N"),
    Setting("data_seed", "data.seed", "seed of the shards' global order (re-permuted each epoch; default 0)",
            kind="int", metavar="N"),
    Setting("packing", "data.packing", "start every sequence at a document start, padded (default: pack "
            "documents across boundaries)", flags=("--no-packing",), kind="switch", switch=False),
    Setting("validation_fraction", "data.validation_fraction", "fraction of documents held out for validation, "
            "by a hash of their names (default 0.01)", kind="float", metavar="F"),
    Setting("input", None, "a text corpus: a directory (every file a document) or a glob", commands=("tokenize",),
            metavar="DIR_OR_GLOB"),
    Setting("out", None, "where the shards go: a directory or gs://BUCKET/PATH", commands=("tokenize",),
            metavar="DIR"),
    Setting("tokenizer", None, "bytes (vocabulary 257, default) or a Hugging Face tokenizer.json",
            commands=("tokenize",), metavar="bytes|FILE"),
    Setting("train_bpe", None, "train a byte-level BPE of this vocabulary on the corpus first (offline)",
            commands=("tokenize",), kind="int", metavar="VOCAB"),
    Setting("jsonl_field", None, "read one document per JSON line, from this field", commands=("tokenize",),
            metavar="NAME"),
    Setting("shard_megabytes", None, "input megabytes per shard (default 64)", commands=("tokenize",),
            kind="float", metavar="MB"),
    Setting("workers", None, "tokenizing processes (default: every core)", commands=("tokenize",), kind="int",
            metavar="N"),
)


def for_command(command: str, table: tuple[Setting, ...] = SETTINGS) -> tuple[Setting, ...]:
    """The settings `command` takes, in table order."""
    return tuple(s for s in table if command in s.commands)


def setting(name: str) -> Setting:
    """The engine setting called `name` (`devices`, `run_dir`, ...)."""
    return _BY_NAME[name]


_BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class Spelling:
    """How the user wrote their options, so that an error quotes them in their own words.

    `front_end` is python (the library), cli (`tpu-trainer`, `invoke`) or make; `used` maps
    a setting's name to the alias the user typed in that front end (`{"devices": "CORES"}`);
    a setting not in `used` is spelled by its own name (`DEVICES`).
    """

    front_end: str = "python"
    used: Mapping[str, str] = field(default_factory=dict)
    command: str = "train"

    def __post_init__(self) -> None:
        assert self.front_end in FRONT_ENDS, self.front_end

    @classmethod
    def from_flags(cls, front_end: str, flags: Mapping[str, str], command: str = "train") -> "Spelling":
        """The spelling of a CLI run from the flags given (name -> flag); make's variables are those
        flags in capitals, because `tasks.py` passes `CORES` on as `--cores`."""
        if front_end == "make":
            return cls(front_end, {name: setting(name).variable_for(flag) for name, flag in flags.items()}, command)
        return cls(front_end, dict(flags), command)

    def name(self, key: str) -> str:
        """The option's name as the user knows it: `devices`, `--cores`, `DEVICES`."""
        return self.used.get(key) or setting(key).names(self.front_end)[0]

    def assign(self, key: str, value: Any) -> str:
        """The setting as the user wrote it: `devices=3`, `--cores 3`, `CORES=3`."""
        name = self.name(key)
        if self.front_end == "python":
            return f"{name}={value!r}"
        if self.front_end == "cli":
            return f"{name} {_plain(value)}"
        return f"{name}={value!r}" if isinstance(value, str) else f"{name}={_plain(value)}"

    def example(self, key: str, value: Any) -> str:
        """A complete command with that setting, for the "Fix:" part of a message."""
        name = self.name(key)
        if self.front_end == "python":
            return f"Trainer({name}={value!r})"
        if self.front_end == "cli":
            return f"tpu-trainer {self.command} {name} {_plain(value)}"
        return f"make {self.command} {name}={_plain(value)}"


def _plain(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)
