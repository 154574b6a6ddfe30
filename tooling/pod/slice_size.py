"""How many workers a Cloud TPU has, when the user says so: `--workers N` or `--accelerator-type`.

Known up front, the count lets `invoke pod --dry-run` print every worker's command without
calling gcloud at all (no credentials, no network). A real launch still asks gcloud
(`tpu-vm describe`, which also says whether the TPU is usable) and refuses a count that
disagrees with it: a job started on too few workers would hang in its first collective.
"""
from __future__ import annotations

from dataclasses import dataclass

from tooling.errors import ToolingError
from trainer.runtime.tpu_host import AcceleratorType, AcceleratorTypeError, parse_accelerator_type


@dataclass(frozen=True)
class SliceSize:
    """What the user said about the TPU's size; both None when they said nothing."""

    workers: int | None = None
    accelerator: AcceleratorType | None = None

    @property
    def count(self) -> int | None:
        if self.workers is not None:
            return self.workers
        return self.accelerator.workers if self.accelerator is not None else None

    @property
    def said(self) -> str:
        """The user's own words, for messages."""
        words = [f"--workers {self.workers}"] if self.workers is not None else []
        words += [f"--accelerator-type {self.accelerator.text}"] if self.accelerator is not None else []
        return " ".join(words)

    def check(self, tpu: str, workers: int, accelerator_type: str) -> None:
        """Refuse a size that disagrees with what gcloud says TPU `tpu` is."""
        if self.count is None:
            return
        described = self.accelerator is None or accelerator_type.lower() in ("", self.accelerator.text.lower())
        if self.count != workers or not described:
            raise ToolingError(
                f"{self.said} disagrees with gcloud, which says TPU {tpu!r} is a "
                f"{accelerator_type or 'TPU'} with {workers} worker(s). The job must run on every "
                "worker of the slice, or it hangs in its first collective: drop the option (gcloud's "
                f"count is used) or correct it, e.g. --workers {workers}."
            )


def parse_slice_size(workers: str = "", accelerator_type: str = "") -> SliceSize:
    """`--workers` and `--accelerator-type` as typed ("" when not given); ToolingError if wrong."""
    count = None
    if workers != "":
        try:
            count = int(workers)
        except ValueError:
            count = None
        if count is None or count < 1:
            raise ToolingError(
                f"--workers {workers} is not a worker count: give the number of VMs of the TPU, "
                "a whole number of at least 1 (e.g. --workers 4 for a v4-32), or leave it out "
                "to ask gcloud."
            )
    accelerator = None
    if accelerator_type:
        try:
            accelerator = parse_accelerator_type(accelerator_type)
        except AcceleratorTypeError as err:
            raise ToolingError(f"--accelerator-type {err} Or give the count itself: --workers N.") from None
    size = SliceSize(count, accelerator)
    if accelerator is not None and count is not None and count != accelerator.workers:
        raise ToolingError(
            f"--workers {count} disagrees with --accelerator-type {accelerator_type}, which has "
            f"{accelerator.workers} worker(s) ({accelerator.chips} chips, {accelerator.chips_per_worker} "
            f"per VM). Give one of the two, or make them agree: --workers {accelerator.workers}."
        )
    return size
