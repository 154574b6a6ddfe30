"""CORES parsing against a host's device count. `pytest tests/test_devices.py` (no torch)."""
import pytest

from trainer.runtime.devices import DeviceSelection, select_devices
from trainer.errors import UserError


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1", DeviceSelection(1)),
        (1, DeviceSelection(1)),
        ("8", DeviceSelection(8)),
        ("auto", DeviceSelection(8)),
        ("[5]", DeviceSelection(1, index=5)),
        ([0], DeviceSelection(1, index=0)),
    ],
)
def test_accepted_selections(raw, expected):
    assert select_devices(raw, host_devices=8) == expected


@pytest.mark.parametrize("raw", ["3", 3, "0", "abc", "[8]", "[0, 1]", "[]", "-1", "1.5", True])
def test_refused_selections_name_the_allowed_values(raw):
    with pytest.raises(UserError) as err:
        select_devices(raw, host_devices=8)
    message = str(err.value)
    assert f"CORES={raw!r}" in message
    assert "1, 8, auto, or one device index as a list, [0] to [7]" in message
    assert "Fix:" in message


def test_single_device_host_only_accepts_one():
    assert select_devices("auto", host_devices=1) == DeviceSelection(1)
    with pytest.raises(UserError, match=r"accepts 1, auto"):
        select_devices("8", host_devices=1)


def test_spmd_only_for_several_devices():
    assert select_devices("8", 8).spmd
    assert not select_devices("[5]", 8).spmd
    assert select_devices("[5]", 8).devices_needed == 6
