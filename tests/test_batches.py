"""Batch type checks, padding and masks. `pytest tests/test_batches.py`."""
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer.data.batches import FixedShapeBatches, map_tensors, pad_batch

Pair = namedtuple("Pair", "x y")


@dataclass
class Sample:
    image: torch.Tensor
    label: int


def test_tensors_in_nested_containers_are_mapped_and_scalars_kept():
    batch = {"a": [torch.ones(2), 3, "id"], "b": Pair(torch.zeros(1), 1.5), "c": Sample(torch.ones(1), 7)}
    out = map_tensors(batch, lambda t: t + 1)
    assert out["a"][0].tolist() == [2.0, 2.0] and out["a"][1:] == [3, "id"]
    assert isinstance(out["b"], Pair) and out["b"].x.item() == 1.0 and out["b"].y == 1.5
    assert isinstance(out["c"], Sample) and out["c"].image.item() == 2.0 and out["c"].label == 7


def test_unsupported_object_names_its_key_path_and_type():
    import numpy as np

    with pytest.raises(TypeError, match=r"batch\['meta'\]\[1\] is a numpy.ndarray.*torch.as_tensor"):
        map_tensors({"x": torch.ones(1), "meta": [1, np.zeros(2)]}, lambda t: t)


def test_padding_repeats_rows_and_leaves_other_tensors():
    batch = {"x": torch.arange(3), "scale": torch.tensor(2.0)}
    padded = pad_batch(batch, size=3, full_size=5)
    assert padded["x"].tolist() == [0, 1, 2, 0, 1]
    assert padded["scale"].item() == 2.0


def _loader(n, batch_size, **kwargs):
    return DataLoader(TensorDataset(torch.arange(n).float()), batch_size=batch_size, **kwargs)


def test_ragged_last_batch_is_padded_with_a_mask():
    batches = list(FixedShapeBatches(_loader(10, 4), "pad"))
    assert [b[0][0].shape[0] for b in batches] == [4, 4, 4]
    assert batches[-1][1].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert batches[0][1].tolist() == [1.0] * 4
    real = torch.cat([b[0][m.bool()] for b, m in batches])
    assert real.tolist() == list(map(float, range(10)))  # every sample exactly once


def test_ragged_last_batch_can_be_dropped():
    shaped = FixedShapeBatches(_loader(10, 4), "drop")
    assert len(shaped) == 2
    assert len(list(shaped)) == 2


def test_even_dataset_needs_no_padding():
    shaped = FixedShapeBatches(_loader(8, 4), "drop")
    assert len(shaped) == 2 and all(m.all() for _, m in shaped)
