"""Run by tests/test_lightning_module.py in a fresh process with 8 emulated devices: fits one of
Lightning's own demo modules through our Trainer and prints what the test checks as JSON.

    python tests/lightning_probe.py boring|transformer|transformer-fsdp|configure-model|init-model|evaluate RUN_DIR
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


def evaluate(run_dir):
    """BoringModel fitted under FSDP on 8 devices, then test and predict of a fresh one from ckpt_path="last"."""
    from pytorch_lightning.demos.boring_classes import BoringModel, RandomDataset

    torch.manual_seed(0)
    trainer = Trainer(devices=8, max_epochs=1, run_dir=run_dir, progress_bar=False, env_profile="cpu",
                      strategy="fsdp")
    trainer.fit(BoringModel(), DataLoader(RandomDataset(32, 64), batch_size=8), DataLoader(RandomDataset(32, 16), batch_size=8))
    torch.manual_seed(1)
    data = RandomDataset(32, 60)  # batches of 8: the last has 4 real rows, padded on the device
    [tested] = trainer.test(BoringModel(), DataLoader(data, batch_size=8), ckpt_path="last")
    predictions = trainer.predict(BoringModel(), DataLoader(data, batch_size=8), ckpt_path="last")
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    whole = os.path.join(os.path.dirname(run_dir), "final.pt")  # the sharded checkpoint, read by torch's own tool
    dcp_to_torch_save(os.path.join(run_dir, "checkpoints", "final.dcp"), whole)
    fitted = BoringModel()
    fitted.load_state_dict(torch.load(whole, weights_only=False)["module"])
    rows = torch.stack([data[i] for i in range(len(data))])
    with torch.no_grad():
        expected = fitted(rows)
        per_batch = [fitted.loss(expected[i:i + 8]) * min(8, len(data) - i) for i in range(0, len(data), 8)]
        untrained = BoringModel()
        control = float(untrained.loss(untrained(rows)))
    return {"test_y": tested["test_y"], "by_hand": float(sum(per_batch) / len(data)), "untrained": control,
            "shapes": [list(p.shape) for p in predictions],
            "max_difference": float((torch.cat(predictions) - expected).abs().max())}


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
           "init-model": lambda: model_memory(run_dir, False), "evaluate": lambda: evaluate(run_dir)}[scenario]()
    print(json.dumps(out))
