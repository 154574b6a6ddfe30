"""Precision names: ours and Lightning's spellings, mapped to three behaviours.

- `fp32`: float32 parameters and math.
- `bf16-mixed`: float32 parameters, forward under `torch.autocast("xla", bfloat16)`.
- `bf16-true`: bfloat16 parameters and inputs (half the memory; less exact updates).

TPUs have no float16 units, so Lightning maps `16`/`16-mixed` to bf16 on XLA; so do we,
and say so. Parsing imports no torch; `autocast`/`cast_*` import it when called.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any

from trainer.errors import UserError

log = logging.getLogger(__name__)

FP32, BF16_MIXED, BF16_TRUE = "fp32", "bf16-mixed", "bf16-true"

ALIASES = {
    "fp32": FP32, "32": FP32, "32-true": FP32,
    "bf16": BF16_MIXED, "bf16-mixed": BF16_MIXED, "16": BF16_MIXED, "16-mixed": BF16_MIXED,
    "bf16-true": BF16_TRUE,
}
_FLOAT16_SPELLINGS = {"16", "16-mixed"}


def canonical_precision(raw: object, source: str = "PRECISION") -> str:
    """Map any accepted spelling to `fp32`, `bf16-mixed` or `bf16-true`; refuse the rest."""
    text = str(raw).strip().lower()
    if text not in ALIASES:
        raise UserError(
            f"{source}={raw!r} is not a precision tpu-trainer knows. Allowed: fp32 (default), "
            "bf16 (autocast mixed precision), bf16-true (bf16 parameters), and Lightning's "
            f"spellings {', '.join(k for k in ALIASES if k not in ('fp32', 'bf16', 'bf16-true'))}. "
            "Fix: e.g. `make train PRECISION=bf16`."
        )
    if text in _FLOAT16_SPELLINGS:
        log.info("precision %r means bf16 mixed precision on XLA (TPUs have no float16 units)", text)
    return ALIASES[text]


class Precision:
    """Applies one canonical precision to a module, its inputs and its forward pass."""

    def __init__(self, name: str):
        assert name in (FP32, BF16_MIXED, BF16_TRUE), name
        self.name = name

    def convert_module(self, module: Any) -> Any:
        """bf16-true stores parameters in bf16; the others keep float32."""
        if self.name == BF16_TRUE:
            import torch

            return module.to(torch.bfloat16)
        return module

    def convert_input(self, tensor: Any) -> Any:
        """bf16-true feeds bf16 floats (cast on the host: half the bytes to transfer)."""
        if self.name == BF16_TRUE and tensor.is_floating_point():
            import torch

            return tensor.to(torch.bfloat16)
        return tensor

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the forward pass runs in."""
        if self.name == BF16_MIXED:
            import torch

            return torch.autocast("xla", dtype=torch.bfloat16)
        return contextlib.nullcontext()
