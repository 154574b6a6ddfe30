"""Reading logged step values from the device without stalling the step.

A logging step registers its device values with `StepReporter.schedule` before the
step's sync; torch_xla runs the read on a background thread once that step's graph has
executed (`backend.after_step`), and the host never waits in the loop.
"""
from __future__ import annotations

import threading
import warnings
from typing import Callable, Mapping

import torch

from trainer.runtime import backend


class StepReporter:
    """Receives a step's values from the device every few steps, on a background thread."""

    def __init__(self, on_values: Callable[[int, int, dict], None]):
        self.on_values = on_values
        self.latest: dict[str, float] = {}
        self.non_finite_steps: list[int] = []
        self._scheduled = self._reported = 0
        self._done = threading.Condition()

    def schedule(self, device_values: Mapping[str, torch.Tensor], host_values: Mapping[str, float],
                 global_step: int, epoch: int) -> None:
        self._scheduled += 1
        names = list(device_values)
        backend.after_step(self._report, ([device_values[n] for n in names], names, dict(host_values), global_step, epoch))

    def drain(self, timeout: float = 60.0) -> None:
        """Wait until every scheduled step is reported (call after the step's sync, e.g. before a checkpoint)."""
        with self._done:
            if not self._done.wait_for(lambda: self._reported >= self._scheduled, timeout=timeout):
                warnings.warn(f"{self._scheduled - self._reported} logged step(s) were not reported within "
                              f"{timeout:.0f} s; steps.csv may miss them", stacklevel=2)

    def _report(self, tensors: list, names: list, host: dict, global_step: int, epoch: int) -> None:
        try:
            values = {**host, **{n: t.item() for n, t in zip(names, tensors)}}
            self.latest = values
            loss = values.get("loss")
            if loss is not None and (loss != loss or loss in (float("inf"), float("-inf"))):
                self.non_finite_steps.append(global_step)
            self.on_values(global_step, epoch, values)
        finally:
            with self._done:
                self._reported += 1
                self._done.notify_all()
