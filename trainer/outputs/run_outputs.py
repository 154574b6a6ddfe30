"""A run directory and everything written into it.

    RUN_DIR/config.yaml     the fully resolved job config, written before training
    RUN_DIR/metrics.csv     one row per epoch: losses, validation metrics, compiles, speed
    RUN_DIR/steps.csv       one row per logged step: loss, lr, grad_norm, self.log values (read asynchronously)
    RUN_DIR/val_steps.csv   validations inside an epoch (trainer.val_check_interval), by global step
    RUN_DIR/tb/             TensorBoard events (the same numbers)
    RUN_DIR/run.json        what produced the run: versions, image, git, environment, resumes
    RUN_DIR/checkpoints/    periodic checkpoints, final.ckpt, and their index.json
    RUN_DIR/metrics.png     loss and validation metrics per epoch
    RUN_DIR/summary.json    the final numbers, for scripts and CI

A resumed run continues in the same directory: steps.csv keeps the rows up to the
checkpoint's step (rows a killed run logged after it are dropped, they will be redone)
and is appended to; metrics.csv keeps the completed epochs. The run manifest lists
every resume, so the directory says where it was resumed from.

Only the process that owns shared outputs (process 0) creates a `RunOutputs` that
writes; the others get `RunOutputs.disabled()`.

Start-up and finish cost: TensorBoard's writer and matplotlib take about 2 s to import on
a small host, which a short job paid in series (TensorBoard before the first step, the
plot after the last). Both are now imported in a background thread started with the
outputs, overlapping torch_xla's first compilations (which release the GIL); the writer
is created on first use, and the plot uses matplotlib's Agg canvas without pyplot.
"""
from __future__ import annotations

import csv
import logging
import os
import threading
from pathlib import Path
from typing import Any, Mapping

import yaml

from trainer.outputs.atomic_files import write_json_atomic, write_text_atomic
from trainer.errors import UserError

log = logging.getLogger(__name__)

_EPOCH_FIELDS = ("epoch", "global_step", "train_loss", "compiles", "epoch_seconds", "samples_per_second")


def default_run_dir(configured: str, job_name: str, root: str = "runs") -> Path:
    """`configured`, or ROOT/<time>-<job name> for a run that names none."""
    if configured:
        return Path(configured)
    from datetime import datetime

    return Path(root) / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{job_name}"


def prepare_run_dir(path: Path, resuming: bool = False) -> Path:
    """Create `path`; refuse one that already holds a run (unless resuming into it)."""
    if not resuming and path.exists() and any(path.iterdir()):
        raise UserError(
            f"the run directory {path} already holds files, and tpu-trainer never overwrites a "
            "run. Fix: pass a new --run-dir (or RUN_DIR=...), leave it empty for a fresh "
            "runs/<time>-<job> directory, or continue that run with --resume auto (RESUME=auto)."
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


class RunOutputs:
    def __init__(self, path: Path | None, resume_step: int | None = None, completed_epochs: int = 0):
        """`resume_step`: continue the files of a run resumed at that global step."""
        self.path = path
        self._lock = threading.Lock()
        self._epoch_rows: list[dict[str, Any]] = []
        self._tb_writer = None
        self._steps_file = None
        self._steps = None
        self._step_fields: list[str] | None = None  # fixed by the first logged step (or the resumed file)
        self._unlisted: set[str] = set()
        self._imports: threading.Thread | None = None
        if path is not None:
            self._imports = threading.Thread(target=_import_writers, name="outputs-imports", daemon=True)
            self._imports.start()
            if resume_step is None:
                self._steps_file = open(path / "steps.csv", "w", newline="")
            else:
                self._epoch_rows = _kept_rows(path / "metrics.csv", "epoch", completed_epochs)
                self._step_fields = _header(path / "steps.csv")
                if self._step_fields:  # rows a killed run logged after the checkpoint will be redone
                    kept = _kept_rows(path / "steps.csv", "global_step", resume_step)
                    write_text_atomic(_csv_text(self._step_fields, kept), path / "steps.csv")
                self._steps_file = open(path / "steps.csv", "a", newline="")

    @property
    def _tb(self) -> Any:
        """The TensorBoard writer, created on first use (callers hold `self._lock`)."""
        if self._tb_writer is None:
            self._imports.join()
            from torch.utils.tensorboard import SummaryWriter

            self._tb_writer = SummaryWriter(log_dir=str(self.path / "tb"))
        return self._tb_writer

    @classmethod
    def disabled(cls) -> "RunOutputs":
        return cls(None)

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def write_config(self, resolved: Mapping[str, Any]) -> None:
        if self.enabled:
            write_text_atomic(yaml.safe_dump(dict(resolved), sort_keys=False), self.path / "config.yaml")

    def log_step(self, global_step: int, epoch: int, values: Mapping[str, float]) -> None:
        """One logged step's values (loss, lr, grad_norm, self.log's); from the step closure thread."""
        if not self.enabled:
            return
        with self._lock:
            if self._step_fields is None:
                self._step_fields = ["global_step", "epoch", "loss"] + sorted(k for k in values if k != "loss")
            if self._steps is None:
                self._steps = csv.DictWriter(self._steps_file, self._step_fields, extrasaction="ignore")
                if self._steps_file.tell() == 0:
                    self._steps.writeheader()
            late = set(values) - set(self._step_fields) - self._unlisted
            if late:
                self._unlisted |= late
                log.warning("steps.csv's columns were fixed by the first logged step; %s appeared later and goes "
                            "to TensorBoard only. Log it from the first step on to have it in the file.",
                            ", ".join(sorted(late)))
            # exact reprs: a resumed run's file must compare bitwise with an uninterrupted one's
            self._steps.writerow({"global_step": global_step, "epoch": epoch,
                                  **{k: repr(v) if isinstance(v, float) else v for k, v in values.items()}})
            for name, value in values.items():
                self._tb.add_scalar(f"train/{name}", value, global_step)

    def log_validation(self, global_step: int, epoch: int, metrics: Mapping[str, float]) -> None:
        """A validation inside an epoch: val_steps.csv and TensorBoard at that step."""
        if not self.enabled or not metrics:
            return
        with self._lock:
            path = self.path / "val_steps.csv"
            fields = ["global_step", "epoch", *sorted(metrics)]
            new = not path.exists()
            with open(path, "a", newline="") as f:
                writer = csv.DictWriter(f, fields, extrasaction="ignore")
                if new:
                    writer.writeheader()
                writer.writerow({"global_step": global_step, "epoch": epoch, **metrics})
            for name, value in metrics.items():
                self._tb.add_scalar(f"val_step/{name}", value, global_step)

    def log_epoch(self, row: Mapping[str, Any]) -> None:
        self._epoch_rows.append(dict(row))
        if not self.enabled:
            return
        with self._lock:
            # every column any epoch had: an epoch without validation (check_val_every_n_epoch) has no val_*
            seen = {k for r in self._epoch_rows for k in r}
            fields = list(_EPOCH_FIELDS) + sorted(seen - set(_EPOCH_FIELDS))
            with open(self.path / "metrics.csv", "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields)
                writer.writeheader()
                writer.writerows(self._epoch_rows)
            for key, value in row.items():
                if key not in ("epoch", "global_step") and isinstance(value, (int, float)):
                    self._tb.add_scalar(f"epoch/{key}", value, row["epoch"])
            self._tb.flush()
            self._steps_file.flush()

    def flush_steps(self) -> None:
        """Make the logged steps durable before a checkpoint claims them."""
        if self.enabled:
            with self._lock:
                self._steps_file.flush()
                os.fsync(self._steps_file.fileno())

    def flush(self) -> None:
        """Everything written so far, on disk (before a gs:// run directory publishes it)."""
        if self.enabled:
            self.flush_steps()
            with self._lock:
                if self._tb_writer is not None:
                    self._tb_writer.flush()

    @property
    def history(self) -> list[dict[str, Any]]:
        return list(self._epoch_rows)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        if self.enabled:
            write_json_atomic(dict(summary), self.path / "summary.json")

    def plot(self) -> None:
        """metrics.png: training/validation loss and every other validation metric per epoch."""
        if not self.enabled or not self._epoch_rows:
            return
        self._imports.join()
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        epochs = [r["epoch"] for r in self._epoch_rows]
        others = sorted(k for k in self._epoch_rows[0] if k.startswith("val_") and k != "val_loss")
        fig = Figure(figsize=(10, 4))
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 2)
        for key in ("train_loss", "val_loss"):
            if key in self._epoch_rows[0]:
                axes[0].plot(epochs, [r[key] for r in self._epoch_rows], marker="o", label=key)
        axes[0].set(title="loss", xlabel="epoch", yscale="log")
        for key in others:
            axes[1].plot(epochs, [r[key] for r in self._epoch_rows], marker="o", label=key)
        axes[1].set(title="validation", xlabel="epoch")
        for ax in axes:
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend()
        fig.tight_layout()
        fig.savefig(self.path / "metrics.png", dpi=100)

    def close(self) -> None:
        if self.enabled:
            with self._lock:
                self._tb.close()  # creates the writer if nothing was logged: tb/ always exists
                self._steps_file.close()


def _import_writers() -> None:
    """Import TensorBoard's writer and matplotlib's Agg canvas ahead of their first use."""
    try:
        import torch.utils.tensorboard  # noqa: F401
        from matplotlib.backends import backend_agg  # noqa: F401
        from matplotlib import figure  # noqa: F401
    except Exception:  # the real import, at first use, raises with its own message
        pass


def _header(path: Path) -> list[str] | None:
    if not path.exists():
        return None
    with open(path, newline="") as f:
        return next(csv.reader(f), None)


def _kept_rows(path: Path, key: str, upto: int) -> list[dict[str, Any]]:
    """Rows of a CSV whose `key` column is <= `upto`, numbers parsed back."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return [row for row in rows if isinstance(row.get(key), int) and row[key] <= upto]


def _csv_text(fields: list[str], rows: list[dict[str, Any]]) -> str:
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\r\n")
    writer.writeheader()
    for row in rows:  # losses keep their exact repr: the resumed file must compare bitwise
        writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return out.getvalue()


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except (TypeError, ValueError):
            pass
    return text
