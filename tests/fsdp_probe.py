"""Run by tests/test_fsdp.py in a fresh process (8 emulated devices): trains the digits MLP
through the library with the strategy and mesh given on the command line, then asks
torch_xla itself how every parameter, its gradient and its AdamW state are laid out, and
prints that as JSON. `python tests/fsdp_probe.py fsdp data:2,fsdp:4 RUN_DIR`
"""
import json
import os
import sys

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "8")

import torch_xla  # noqa: E402  (the test reads the layout from torch_xla, not from the engine)

from trainer import Trainer, seed_everything  # noqa: E402
from trainer.examples.digits import DigitsClassifier  # noqa: E402


class Probed(DigitsClassifier):
    def configure_optimizers(self):
        self.optimizer = super().configure_optimizers()
        return self.optimizer

    def on_before_optimizer_step(self, optimizer):
        # Sharding annotations are metadata: reading them is no device read.
        self.gradient_specs = {n: torch_xla._XLAC._get_xla_sharding_spec(p.grad) for n, p in self.named_parameters()}


def layout(tensor):
    shards = torch_xla._XLAC._get_local_shards([tensor])[0]
    return {"spec": torch_xla._XLAC._get_xla_sharding_spec(tensor), "shape": list(tensor.shape),
            "local_shapes": [list(shard.shape) for shard, _ in shards]}


strategy, mesh, run_dir = sys.argv[1], sys.argv[2], sys.argv[3]
seed_everything(0)
module = Probed(hidden=256)
Trainer(devices=8, strategy=strategy, mesh=mesh, max_epochs=1, run_dir=run_dir, progress_bar=False,
        env_profile="cpu").fit(module)
state = module.optimizer.state
print(json.dumps({
    name: {"param": layout(p), "exp_avg": layout(state[p]["exp_avg"]), "grad_spec": module.gradient_specs[name]}
    for name, p in module.named_parameters()
}))
