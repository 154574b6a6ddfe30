"""Run by tests/test_lightning_module.py in a fresh process with 8 emulated devices: fits one of
Lightning's own demo modules through our Trainer and prints what the test checks as JSON.

    python tests/lightning_probe.py boring|transformer|transformer-fsdp|configure-model|init-model RUN_DIR
"""
import json
import os
import re
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "8")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from trainer import Trainer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.lightning_text import stdlib_wikitext  # noqa: E402

LAYERS, WIDTH = 8, 4096  # 8 x 4096 x 4096 float32 weights: 537 MB unsharded


def reset_rss_peak() -> None:
    """Linux's peak-RSS reset (clear_refs 5): the peak measured after it starts from the current
    resident size, not from a transient left over from the imports."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss_peak_mb() -> float:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024


def fit(module, run_dir, *loaders, **options):
    options = {"devices": 8, "max_epochs": 2, "run_dir": run_dir, "progress_bar": False, "env_profile": "cpu",
               "log_every_n_steps": 1, **options}
    return Trainer(**options).fit(module, *loaders)


def boring(run_dir):
    from pytorch_lightning.demos.boring_classes import BoringModel, RandomDataset

    torch.manual_seed(0)
    module = BoringModel()
    result = fit(module, run_dir, DataLoader(RandomDataset(32, 64), batch_size=8),
                 DataLoader(RandomDataset(32, 64), batch_size=8))
    return {"history": result.history, "compiles": result.compiles_per_epoch}


def transformer(run_dir, strategy="data"):
    from pytorch_lightning.demos.transformer import LightningTransformer, WikiText2

    stdlib_wikitext(os.path.dirname(run_dir))
    os.chdir(os.path.dirname(run_dir))  # WikiText2 reads ./data/wikitext-2.txt (our stdlib text)
    torch.manual_seed(0)
    dataset = WikiText2(download=False)
    module = LightningTransformer(vocab_size=dataset.vocab_size)
    result = fit(module, run_dir, DataLoader(dataset, batch_size=8, shuffle=True,
                                             generator=torch.Generator().manual_seed(0)), strategy=strategy)
    return {"history": result.history, "compiles": result.compiles_per_epoch}


def _layers():
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)])


def model_memory(run_dir, in_configure_model):
    from pytorch_lightning import LightningModule

    class Big(LightningModule):
        def __init__(self):
            super().__init__()
            self.net = None if in_configure_model else _layers()

        def configure_model(self):
            if self.net is None:
                self.net = _layers()
                from trainer.parallel.sharding import sharding_of
                self.specs = [sharding_of(layer.weight) for layer in self.net]  # right after creation

        def on_train_start(self):
            self.peak_at_train_start = rss_peak_mb()

        def training_step(self, batch, batch_idx):
            return self.net(batch).float().pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    reset_rss_peak()
    before = rss_peak_mb()
    module = Big()
    fit(module, run_dir, DataLoader(torch.randn(16, WIDTH), batch_size=8), strategy="fsdp", max_epochs=1,
        max_steps=1)
    return {"setup_growth_mb": module.peak_at_train_start - before, "model_mb": LAYERS * WIDTH * WIDTH * 4 / 2**20,
            "specs": getattr(module, "specs", [])}


if __name__ == "__main__":
    scenario, run_dir = sys.argv[1], sys.argv[2]
    out = {"boring": lambda: boring(run_dir), "transformer": lambda: transformer(run_dir),
           "transformer-fsdp": lambda: transformer(run_dir, "fsdp"),
           "configure-model": lambda: model_memory(run_dir, True),
           "init-model": lambda: model_memory(run_dir, False)}[scenario]()
    print(json.dumps(out))
