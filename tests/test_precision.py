"""Precision names and their effect on XLA. `pytest tests/test_precision.py`."""
import logging

import pytest
import torch

from trainer.errors import UserError
from trainer.fit.precision import BF16_MIXED, BF16_TRUE, FP32, Precision, canonical_precision


@pytest.mark.parametrize(
    "raw, expected",
    [("fp32", FP32), ("32", FP32), ("32-true", FP32), (32, FP32), ("bf16", BF16_MIXED),
     ("bf16-mixed", BF16_MIXED), ("16", BF16_MIXED), ("16-mixed", BF16_MIXED), ("BF16-TRUE", BF16_TRUE)],
)
def test_spellings_map_to_three_behaviours(raw, expected):
    assert canonical_precision(raw) == expected


def test_sixteen_says_it_means_bf16(caplog):
    with caplog.at_level(logging.INFO):
        canonical_precision("16-mixed")
    assert "means bf16" in caplog.text


@pytest.mark.parametrize("raw", ["fp16", "64", "half", ""])
def test_unknown_precision_lists_the_allowed(raw):
    with pytest.raises(UserError, match="Allowed: fp32 .*bf16 .*bf16-true.*16-mixed"):
        canonical_precision(raw)


def test_bf16_mixed_runs_matmuls_in_bf16_on_xla(xla_device):
    layer = torch.nn.Linear(4, 4).to(xla_device)
    with Precision(BF16_MIXED).autocast():
        out = layer(torch.ones(2, 4, device=xla_device))
    assert out.dtype == torch.bfloat16
    assert layer.weight.dtype == torch.float32


def test_bf16_true_converts_parameters_and_float_inputs_only():
    p = Precision(BF16_TRUE)
    assert p.convert_module(torch.nn.Linear(2, 2)).weight.dtype == torch.bfloat16
    assert p.convert_input(torch.ones(2)).dtype == torch.bfloat16
    assert p.convert_input(torch.ones(2, dtype=torch.long)).dtype == torch.long
