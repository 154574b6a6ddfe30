"""`DiagnosticsConfig`: what a run reports about XLA itself (the job's `diagnostics:` section).

Imports no torch: validated with the rest of the job config, before XLA starts.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainer.errors import require


@dataclass(frozen=True)
class DiagnosticsConfig:
    """What the run reports about XLA itself (trainer.diagnostics). CLI: --debug, --strict-compile, ..."""

    debug: bool = False
    """Save torch_xla's metrics report (RUN_DIR/xla_metrics.txt) and its compile/execute causes with
    Python lines (RUN_DIR/xla_debug.txt), and print a short summary. Slower: for diagnosis. CLI: --debug."""
    strict_compile: bool = False
    """A compilation after warm-up fails the run instead of logging a warning. CLI: --strict-compile."""
    warmup_steps: int = 3
    """Steps allowed to compile (the step graph, then with the optimizer's state) before the guard speaks."""
    profile_steps: str = ""
    """"FIRST:LAST": capture an XLA profiler trace of these global steps into RUN_DIR/profile. CLI: --profile-steps."""
    profile_port: int = 9012
    """Port of the profiler server started for a profile window (also lets TensorBoard capture live)."""
    compile_cache: str = ""
    """Directory for XLA's persistent compilation cache; switched off where the backend cannot reload
    executables (PJRT CPU in torch_xla 2.9). CLI: --compile-cache."""
    quiet_xla_logs: bool = True
    """Show XLA's per-compilation GSPMD deprecation warning once instead of on every SPMD compilation."""

    def __post_init__(self) -> None:
        require(self.warmup_steps >= 0, "diagnostics.warmup_steps", self.warmup_steps, "an integer >= 0")
        require(1 <= self.profile_port <= 65535, "diagnostics.profile_port", self.profile_port, "a TCP port, 1-65535")
        if self.profile_steps:
            from trainer.diagnostics.profile_window import StepWindow

            StepWindow.parse(self.profile_steps, flag="diagnostics.profile_steps (--profile-steps)")
