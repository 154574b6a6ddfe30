"""`RunDiagnostics`: every diagnostic of one fit, behind five calls the loop makes.

Wiring (what the session/loop must do; nothing else touches torch_xla for diagnostics):

    diag = RunDiagnostics(job.diagnostics, log_every_n_steps=cfg.log_every_n_steps)
    apply_environment(plan); os.environ.update(diag.environment())   # before start_xla
    runtime = start_xla(plan)
    diag.start(pjrt_device=plan.env["PJRT_DEVICE"], xla_version=runtime.xla_version,
               run_dir=run_dir)                 # right after start_xla, before any tensor work
    for each training step:
        diag.before_step(global_step + 1, batch)  # batch = the device batch, before training_step
        ... training_step, backward, optimizer, reporter.schedule, torch_xla.sync() ...
        diag.after_step(global_step, is_logging_step=global_step % log_every_n_steps == 0)
                                                  # right after the sync, BEFORE checkpoint/after_step
    at epoch end (after validation and the accumulators' read):
        row.update(diag.epoch_end())              # metrics.csv columns
    after the last epoch (also in a `finally` on failure, so a profile window is closed):
        summary.update(diag.finish(run_dir))      # summary.json keys; writes the debug files

`after_step` raises `UserError` under --strict-compile; let it propagate (exit code 2).
Per step the hot path is three C++ counter look-ups in each call, a walk over the batch's
tensors' shapes, and a set lookup: no device reads, nothing that grows with the run.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from trainer.runtime import backend
from trainer.diagnostics import compile_cache, xla_metrics
from trainer.diagnostics.host_reads import HostReadTracker
from trainer.diagnostics.profile_window import ProfilerCapture, StepWindow
from trainer.diagnostics.recompile import RecompileGuard, batch_signature
from trainer.diagnostics.xla_debug_log import DebugLog, debug_environment

log = logging.getLogger("trainer.diagnostics")
REPORT_FILE = "xla_metrics.txt"
DEBUG_LOG_FILE = "xla_debug.txt"
PROFILE_DIR = "profile"
_NAMED_STEPS = 5  # steps whose host reads are named one by one; the rest are counted


class RunDiagnostics:
    def __init__(self, config: Any, log_every_n_steps: int = 10):
        """`config`: a `trainer.config.DiagnosticsConfig` (validated)."""
        self.config = config
        self.guard = RecompileGuard(config.warmup_steps, config.strict_compile)
        self.reads = HostReadTracker()
        self.window = StepWindow.parse(config.profile_steps) if config.profile_steps else None
        self.profiler: ProfilerCapture | None = None
        self.debug_log: DebugLog | None = None
        if config.debug:
            fd, name = tempfile.mkstemp(prefix="xla-debug-", suffix=".txt")
            os.close(fd)
            self.debug_log = DebugLog(Path(name))
        self.named: list[dict] = []
        self.cache = compile_cache.CacheDecision(False, "", "not requested")
        self._t0 = self._first_step_seconds = None
        self._start = self._epoch_start = self._aten_mark = None
        self._epoch = {"compiles_after_warmup": 0, "reads_before": 0, "steps": 0}
        self._signature = None
        self._counts = (0, 0, 0)

    def environment(self) -> dict[str, str]:
        """Variables to export before torch_xla starts (debug mode: its compile/execute analysis)."""
        return debug_environment(self.debug_log.path) if self.debug_log else {}

    def start(self, pjrt_device: str, xla_version: str, run_dir: Path | None = None) -> None:
        """After start_xla, before any tensor work: log filter, cache, profiler server, baselines."""
        if self.config.quiet_xla_logs:
            from trainer.diagnostics.quiet_logs import quiet_xla_logs

            quiet_xla_logs()
        self.cache = compile_cache.decide(self.config.compile_cache, pjrt_device, xla_version)
        compile_cache.apply(self.cache)
        if self.window is not None:
            self.profiler = ProfilerCapture(self.window, Path(run_dir or ".") / PROFILE_DIR, self.config.profile_port)
            self.profiler.start()
        self._t0 = time.perf_counter()
        self._start = self._epoch_start = self._aten_mark = xla_metrics.snapshot()
        self._counts = self._read_counts()

    @staticmethod
    def _read_counts() -> tuple[int, int, int]:
        return xla_metrics.compile_count(), xla_metrics.host_read_count(), xla_metrics.scalar_read_count()

    def before_step(self, step: int, batch: Any) -> None:
        compiles, host, scalar = self._read_counts()
        self.reads.gap(scalar - self._counts[2], host - self._counts[1])
        self._counts = (compiles, host, scalar)
        self._signature = batch_signature(batch)
        if self.debug_log is not None:  # what torch_xla explains from here on belongs to this step
            self.debug_log.skip_to_end()
        if self.profiler is not None:
            self.profiler.before_step(step)

    def after_step(self, step: int, is_logging_step: bool, engine_reads: int = 1) -> None:
        """`engine_reads`: the `.item()` reads the engine's logging closure makes for a logging step."""
        self.reads.reads_per_logging_step = engine_reads
        before, now = self._counts, self._read_counts()
        self._counts = now
        if self.profiler is not None:
            self.profiler.after_step(step)
        if self._first_step_seconds is None:
            self._first_step_seconds = time.perf_counter() - self._t0
        self._epoch["steps"] += 1
        compiled = now[0] - before[0]
        own = self.reads.window(step, now[1] - before[1], now[2] - before[2], is_logging_step)
        explained = self.debug_log.read_new() if self.debug_log is not None and (compiled or own) else []
        if own is not None:
            self._name_reads(own, explained)
        if compiled:
            cause = [f"{a.cause} at {a.culprit}" for a in explained if a.kind == "Compilation"]
            message = self.guard.observe(step, self._signature, compiled, cause)  # raises when strict
            if message:
                self._epoch["compiles_after_warmup"] += compiled
                log.warning("%s", message)
        else:
            self.guard.observe(step, self._signature, 0)

    def _name_reads(self, own: Any, explained: list) -> None:
        """Name the ops and (in debug mode) the Python line of a step's host reads; first few steps only."""
        if len(self.named) >= _NAMED_STEPS:
            return
        mark, self._aten_mark = self._aten_mark, xla_metrics.snapshot()
        ops = (self._aten_mark - mark).fallback_ops
        lines = [a.culprit for a in explained if a.is_host_read]
        entry = {"step": own.step, "host_reads": own.host_reads, "item_reads": own.scalar_reads,
                 "cpu_fallback_ops": ops, "at": sorted(set(lines))}
        self.named.append(entry)
        what = [f".item()/bool() x{own.scalar_reads}"] if own.scalar_reads else []
        what += [f"CPU fallback {name} x{n}" for name, n in ops.items()]
        where = f" at {', '.join(entry['at'])}" if entry["at"] else " (--debug names the Python line)"
        log.warning("step %d: %d device->host read(s) inside the training step (%s)%s; each one stalls the "
                    "host until the device finishes. Fix: keep values on the device, log through the "
                    "engine's logging steps.%s", own.step, own.host_reads, ", ".join(what) or "copies",
                    where, " Further steps are only counted." if len(self.named) == _NAMED_STEPS else "")

    def epoch_end(self) -> dict[str, Any]:
        """Columns for metrics.csv, for the epoch just finished (call after its last read)."""
        now = xla_metrics.snapshot()
        delta, self._epoch_start = now - self._epoch_start, now
        steps = max(self._epoch["steps"], 1)
        reads = max(0, self.reads.user_reads - self._epoch["reads_before"])
        row = {
            "compiles_after_warmup": self._epoch["compiles_after_warmup"],
            "host_transfers_per_step_outside_logging": round(reads / steps, 3),
            "cpu_fallback_ops": sum(delta.fallback_ops.values()),
        }
        self._epoch = {"compiles_after_warmup": 0, "reads_before": self.reads.user_reads, "steps": 0}
        return row

    def finish(self, run_dir: Path | None) -> dict[str, Any]:
        """Close the profile window; summary.json keys; debug mode: report files and a printed summary."""
        trace = self.profiler.close() or self.profiler.trace if self.profiler is not None else None
        if self._start is None:
            return {}
        backend.wait_device_ops()  # torch_xla counts an execution when it completes: let queued ones land
        delta = xla_metrics.snapshot() - self._start
        summary: dict[str, Any] = {
            "xla_compiles": delta.compiles, "xla_compile_seconds": round(delta.compile_seconds, 3),
            "xla_executions": delta.executions, "xla_execute_seconds": round(delta.execute_seconds, 3),
            "seconds_to_first_step": None if self._first_step_seconds is None else round(self._first_step_seconds, 3),
            "recompilations_after_warmup": self.guard.events,
            "host_reads_outside_logging": self.reads.user_reads,
            "host_read_steps": self.named,
            "cpu_fallback_ops": delta.fallback_ops,
            "compile_cache": self.cache.describe(),
            **compile_cache.cache_counts(delta.cache),
        }
        if trace is not None or self.window is not None:
            summary["profile_trace"] = str(trace) if trace else None
        if self.config.debug and run_dir is not None:
            summary["xla_metrics_report"] = str(xla_metrics.write_report(Path(run_dir) / REPORT_FILE))
            if self.debug_log is not None and self.debug_log.path.exists():
                shutil.copyfile(self.debug_log.path, Path(run_dir) / DEBUG_LOG_FILE)
                summary["xla_debug_log"] = str(Path(run_dir) / DEBUG_LOG_FILE)
            for line in xla_metrics.summary_lines(delta):
                log.info("debug: %s", line)
            log.info("debug: torch_xla's full metrics report: %s", summary["xla_metrics_report"])
        return summary
