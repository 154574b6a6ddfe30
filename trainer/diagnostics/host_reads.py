"""Device-to-host reads per step, told apart from the engine's own logging reads.

Every `.item()`, `.cpu()`, `bool(tensor)` or CPU-fallback op copies from the device and
stalls the host until the device has finished: one in the step loop costs a whole step's
pipelining. The engine itself reads the loss every `log_every_n_steps` steps, with
`.item()` in an asynchronous step closure on another thread, some time after that step's
sync: in the same step's window, in the gap before the next step, or in a later window.
Only the global counters exist, so reads are split in two kinds:

- copies that are not `.item()` (`.cpu()`, a CPU fallback's inputs) are never the
  engine's logging: they are the copies the `.item()` count does not explain, counted
  cumulatively (gaps included), because an `.item()` on the closure thread bumps its two
  counters one after the other and a window can see one half of it;
- `.item()` reads are counted over the whole run, windows and gaps, and the engine's one
  read per logging step is subtracted: the count is exact once the last closure has run
  (a closure still in flight at an epoch's end shows in the next epoch, not twice).

Naming a step (which step read) uses a running debt and never blames a step when nothing
but the engine reads; when both read it may name the step after the true one.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepReads:
    """Reads the tracker attributes to one step."""

    step: int
    host_reads: int
    scalar_reads: int


@dataclass
class HostReadTracker:
    reads_per_logging_step: int = 1
    """`.item()` calls the engine makes per logging step (the loss)."""
    expected_scalar: int = 0
    scalar_total: int = 0
    host_total: int = 0
    other_total: int = 0
    owed: int = 0
    steps: int = 0

    @property
    def user_reads(self) -> int:
        """Reads the user's (or a library's) code made so far, outside the engine's logging."""
        return self.other_total + max(0, self.scalar_total - self.expected_scalar)

    def gap(self, scalar_reads: int, host_reads: int = 0) -> None:
        """Reads between two step windows: only a logging closure runs there."""
        self.scalar_total += scalar_reads
        # Only copies that complete an `.item()` count here; the engine's own reads between steps
        # (epoch sums, validation, checkpoints) are not the step's.
        self.host_total += min(host_reads, max(0, self.scalar_total - self.host_total))
        self.owed = max(0, self.owed - scalar_reads)

    def window(self, step: int, host_reads: int, scalar_reads: int, is_logging_step: bool) -> StepReads | None:
        """Account one step's window; returns the reads it attributes to this step, if any."""
        self.steps += 1
        self.scalar_total += scalar_reads
        self.host_total += host_reads
        other = max(0, self.host_total - self.scalar_total - self.other_total)  # copies no .item() explains
        self.other_total += other
        allowance = self.owed + (self.reads_per_logging_step if is_logging_step else 0)
        own_scalar = max(0, scalar_reads - allowance)
        self.owed = max(0, allowance - scalar_reads)
        if is_logging_step:
            self.expected_scalar += self.reads_per_logging_step
        if other + own_scalar <= 0:
            return None
        return StepReads(step, other + own_scalar, own_scalar)
