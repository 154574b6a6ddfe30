"""The background device loader. `pytest tests/test_device_loader.py` (one PJRT CPU device)."""
from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader

from trainer.data.batches import FixedShapeBatches
from trainer.data.device_loader import BatchTransfer, DeviceLoader


@dataclass
class Item:
    pixels: torch.Tensor
    name: str


def _identity(t):
    return t


def test_nested_batches_move_tensors_and_keep_host_values(xla_device):
    batches = [({"x": torch.ones(4, 2), "item": Item(torch.zeros(4), "a"), "step": 3}, torch.ones(4))]
    loader = DeviceLoader(batches, BatchTransfer(xla_device, None, False, _identity))
    (batch, mask), = list(loader)
    assert batch["x"].device.type == "xla" and mask.device.type == "xla"
    assert batch["item"].pixels.device.type == "xla" and batch["item"].name == "a"
    assert batch["step"] == 3
    assert batch["x"].cpu().sum().item() == 8


def test_bad_batch_type_surfaces_in_the_loop_with_its_path(xla_device):
    class Opaque:
        pass

    def collate(rows):
        return {"x": torch.stack(rows), "extra": Opaque()}

    host = DataLoader([torch.ones(2)] * 4, batch_size=2, collate_fn=collate)
    loader = DeviceLoader(FixedShapeBatches(host, "pad"), BatchTransfer(xla_device, None, False, _identity))
    with pytest.raises(TypeError, match=r"batch\['extra'\] is a .*Opaque"):
        list(loader)


def test_stopping_early_does_not_hang(xla_device):
    batches = [(torch.full((2,), float(i)), torch.ones(2)) for i in range(50)]
    loader = DeviceLoader(batches, BatchTransfer(xla_device, None, False, _identity), prefetch=1)
    for i, (batch, _) in enumerate(loader):
        if i == 2:
            break
    assert batch.cpu().tolist() == [2.0, 2.0]
