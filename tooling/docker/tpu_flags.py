"""The flags a container needs on a TPU VM, as pytorch/xla documents them for its own images.

pytorch/xla's README: "please pass `--privileged --net host --shm-size=16G`". Privileged
gives the container the TPU device files; the host network lets the workers of a pod reach
each other and the metadata server as the host does; and Docker's default /dev/shm of 64 MB
is too small for DataLoader worker processes, which hand batches over through shared
memory (they die with "bus error" when it fills). `invoke pod` and `invoke run` both use
these, with the size configurable (`--shm-size`).
"""
from __future__ import annotations

import re

from tooling.errors import ToolingError

DEFAULT_SHM_SIZE = "16g"
# Docker's spelling (its CLI and its Python SDK agree on it): a number above 0 and a unit
# b, k, m or g (kb, mb, gb too). A bare number means bytes there, which is never what
# anyone sizing /dev/shm meant, so a unit is required here.
_SIZE = re.compile(r"(?=[0.]*[1-9])[0-9]+(\.[0-9]+)?([kmg]b?|b)", re.IGNORECASE)


def check_shm_size(text: str, flag: str = "--shm-size") -> None:
    """Refuse a /dev/shm size docker would not take (or would take as bytes)."""
    if not _SIZE.fullmatch(text):
        raise ToolingError(
            f"{flag} {text!r} is not a size for the container's /dev/shm: give a number above 0 "
            "and a unit, b, k, m or g, as docker spells it (e.g. 512m or 16g; "
            f"the default {DEFAULT_SHM_SIZE} is what pytorch/xla's TPU images ask for). "
            f"Fix: {flag} {DEFAULT_SHM_SIZE}."
        )
