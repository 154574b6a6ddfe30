"""`notebook_launch` from a real Jupyter kernel (nbclient + ipykernel), twice in the same kernel.

`pytest tests/test_notebook.py` (about a minute and a half: two 8-device SPMD trainings).
"""
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO

CELLS = [
    "import sys, torch\n"
    "from trainer import Trainer, notebook_launch\n"
    "from trainer.examples.digits import DigitsClassifier\n"
    "torch.manual_seed(0)\n"
    "model = DigitsClassifier()  # built once, in the kernel, on the CPU",

    "def train(module, epochs, run_dir):\n"
    "    result = Trainer(devices=8, max_epochs=epochs, env_profile='cpu', progress_bar=False,\n"
    "                     run_dir=run_dir).fit(module)\n"
    "    h = result.history\n"
    "    print(f'child: loss {h[0][\"train_loss\"]:.4f} -> {h[-1][\"train_loss\"]:.4f}')\n"
    "    return {'first_loss': h[0]['train_loss'], 'last_loss': h[-1]['train_loss'],\n"
    "            'val_accuracy': result.metrics['val_accuracy'], 'devices': 8}",

    "r1 = notebook_launch(train, (model, 3, {run1!r}))\n"
    "print('RESULT1', r1['first_loss'], r1['last_loss'], r1['val_accuracy'])\n"
    "print('XLA_IN_KERNEL', 'torch_xla' in sys.modules)",

    "r2 = notebook_launch(train, (model, 3, {run2!r}))\n"
    "print('RESULT2', r2['first_loss'], r2['last_loss'], r2['val_accuracy'])",
]


def _outputs(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


@pytest.mark.slow
def test_notebook_launch_trains_twice_in_one_real_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    source = [c.replace("{run1!r}", repr(str(tmp_path / "run1"))).replace("{run2!r}", repr(str(tmp_path / "run2")))
              for c in CELLS]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in source])
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    first, second = _outputs(nb.cells[2]), _outputs(nb.cells[3])
    for text, tag in ((first, "RESULT1"), (second, "RESULT2")):
        line = next(l for l in text.splitlines() if l.startswith(tag))
        first_loss, last_loss, accuracy = map(float, line.split()[1:])
        assert last_loss < 0.5 * first_loss, text
        assert accuracy >= 0.9, text
        assert "child: loss" in text  # the child's prints reach the cell
    assert "XLA_IN_KERNEL False" in first  # the kernel stayed free of XLA, so the second launch can fork
    assert (tmp_path / "run1" / "summary.json").exists() and (tmp_path / "run2" / "summary.json").exists()
    # the same model and seed in two fresh processes: the same training
    assert first.split("RESULT1")[1].split()[:2] == second.split("RESULT2")[1].split()[:2]


def test_notebook_launch_refuses_a_kernel_that_already_started_xla(xla_device):
    import torch

    from trainer import UserError, notebook_launch

    torch.ones(2).to(xla_device).sum()  # this process has started PJRT
    with pytest.raises(UserError, match="already started the XLA runtime.*restart the kernel"):
        notebook_launch(print, ("never runs",))
