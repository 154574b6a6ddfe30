"""Moving modules to XLA: re-tying shared weights, re-pointing early optimizers.

`pytest tests/test_model_setup.py` (one PJRT CPU device, in process).
"""
import copy

import pytest
import torch
from torch import nn

from trainer.fit.model_setup import move_module, repoint_optimizer, unique_parameter_count


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.decode = nn.Linear(4, 10, bias=False)
        self.decode.weight = self.embed.weight
        self.hook_calls = 0

    def on_post_move_to_device(self):
        self.hook_calls += 1


def test_plain_move_unties_weights_which_is_why_we_retie(xla_device):
    raw = TiedLM()
    assert unique_parameter_count(raw) == 1
    raw.to(xla_device)
    assert unique_parameter_count(raw) == 2  # torch 2.9 + torch_xla: the tie is lost


def test_move_module_keeps_ties_and_calls_the_hook(xla_device):
    model = TiedLM()
    moved = move_module(model, xla_device)
    assert moved.module.decode.weight is moved.module.embed.weight
    assert unique_parameter_count(model) == 1
    assert model.hook_calls == 1
    assert model.embed.weight.device.type == "xla"


def test_parameter_count_change_after_hook_warns(xla_device):
    class Splits(TiedLM):
        def on_post_move_to_device(self):
            self.decode.weight = nn.Parameter(self.embed.weight.detach().clone())

    with pytest.warns(UserWarning, match="had 1 distinct parameters before .* and has 2 after"):
        move_module(Splits(), xla_device)


def _train_steps(model, optimizer, device, steps=20):
    import torch_xla

    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0)).to(device)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    losses = []
    for _ in range(steps):
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        losses.append(loss.item())
    return losses


def test_optimizer_built_before_the_move_trains_after_repointing(xla_device):
    torch.manual_seed(0)
    template = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    stranded = copy.deepcopy(template)
    opt = torch.optim.SGD(stranded.parameters(), lr=0.5)
    stranded.to(xla_device)
    flat = _train_steps(stranded, opt, xla_device)
    assert flat[-1] == pytest.approx(flat[0])  # the trap: nothing trains

    model = copy.deepcopy(template)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    moved = move_module(model, xla_device)
    assert repoint_optimizer(opt, moved) == 4
    losses = _train_steps(model, opt, xla_device)
    assert losses[-1] < 0.5 * losses[0]


def test_foreign_parameter_in_optimizer_is_refused(xla_device):
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD([nn.Parameter(torch.ones(3))], lr=0.1)
    moved = move_module(model, xla_device)
    with pytest.raises(ValueError, match="not one of the module's"):
        repoint_optimizer(opt, moved)
