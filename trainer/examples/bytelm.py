"""A real language-model job: a small GPT-style byte-level decoder on the stdlib's sources.

Our own code, no download, no pretrained weights. Bytes in (vocabulary 256), learned
positions, `n_layer` pre-norm `Block`s (causal self-attention + MLP) in an `nn.ModuleList`
(so FSDP can wrap per block by class name), a final LayerNorm, and an lm_head tied to the
token embedding. Every shape is fixed (context, batch), and forward has no data-dependent
Python branches, so XLA compiles one training and one validation graph.

The bar: a validation loss at least 30% below the best add-k byte-bigram model's
on the same split, which `on_fit_start` computes and logs. Data: `bytelm_data.py`.

Schedule: per optimizer step, linear warm-up from 0 then cosine decay to 0 over
`total_steps()`, i.e. epochs x ceil(ceil(train_windows / batch_size) / accumulate_grad_batches).
`epochs` and `accumulate_grad_batches` are module args so that the schedule is known
outside a fit too (`self.trainer.estimated_stepping_batches` gives the same count inside
one): keep them equal to trainer.max_epochs and trainer.accumulate_grad_batches
(bytelm.yaml ties them with YAML anchors).
"""
from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from trainer.examples.bytelm_data import TrainWindows, ValWindows, bigram_baseline, load_corpus
from trainer.module import TrainModule

log = logging.getLogger(__name__)

SCHEDULES = ("warmup_cosine", "epoch_cosine")
DATA = ("windows", "shards")


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class ByteLM(TrainModule):
    def __init__(self, context: int = 64, d_model: int = 96, n_layer: int = 3, n_head: int = 4,
                 batch_size: int = 64, train_windows: int = 8192, val_windows: int = 1024, epochs: int = 14,
                 accumulate_grad_batches: int = 1, lr: float = 1e-2, weight_decay: float = 0.1,
                 warmup_steps: int = 100, schedule: str = "warmup_cosine", shuffle_seed: int = 0,
                 data: str = "windows", vocab_size: int = 256):
        """`train_windows` caps the windows per epoch (the run's length); `epochs` and
        `accumulate_grad_batches` only size the schedule (see the module docstring).
        `schedule="epoch_cosine"` is for an engine that steps schedulers once per epoch: there
        the default per-step warm-up would hold lr at 0 for the whole first epoch.

        `data="shards"`: the job's `data:` section feeds token shards (`{"input_ids", "labels"}`,
        seq_len = context + 1: the model shifts), `vocab_size` is the shards' (257 for bytes,
        the BPE's size otherwise), the schedule's length is the fit's own
        (`self.trainer.estimated_stepping_batches`) and there is no bigram baseline (its
        windows are this module's own data)."""
        super().__init__()
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r}; allowed: {', '.join(SCHEDULES)}")
        if data not in DATA:
            raise ValueError(f"data={data!r}; allowed: {', '.join(DATA)}")
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} must be a multiple of n_head={n_head}")
        self.context, self.batch_size = context, batch_size
        self.train_windows, self.val_windows = train_windows, val_windows
        self.epochs, self.accumulate_grad_batches = epochs, accumulate_grad_batches
        # float(): YAML 1.1 (and so `--set module_args.lr=3e-3`) reads "3e-3" as a string.
        self.lr, self.weight_decay, self.warmup_steps = float(lr), float(weight_decay), warmup_steps
        self.schedule, self.shuffle_seed, self.data = schedule, shuffle_seed, data
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Parameter(torch.zeros(context, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied: the engine re-ties it after the move
        self._init_weights(n_layer)
        self.baseline: dict[str, float] | None = None
        self._train_set: TrainWindows | None = None

    def _init_weights(self, n_layer: int) -> None:
        # GPT-2's init: N(0, 0.02) everywhere, and the two projections that write into the
        # residual stream scaled by 1/sqrt(2 n_layer) so its variance does not grow with depth.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.pos_emb, std=0.02)
        for block in self.blocks:
            for proj in (block.proj, block.out):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """int64 [B, T <= context] tokens -> logits [B, T, vocab_size]."""
        if idx.shape[1] > self.context:  # a static shape: checked while tracing, no device read
            raise ValueError(f"sequences of {idx.shape[1]} tokens are longer than context={self.context}; with "
                             f"token shards use seq_len = context + 1 = {self.context + 1}")
        x = self.tok_emb(idx) + self.pos_emb[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def _per_sample_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Float32 for the softmax even under bf16 autocast; mean over the sequence per
        # sample ([B]) so the engine can mask the padded rows of a ragged batch exactly.
        nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
        return nll.mean(dim=1)

    def _inputs_targets(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets): a window pair, or a token-shard batch shifted by one."""
        if isinstance(batch, dict):
            return batch["input_ids"][:, :-1], batch["labels"][:, 1:]
        return batch

    def _shard_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Unpacked shards pad with labels -100: the mean over each sequence's real targets.
        nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none", ignore_index=-100)
        return nll.sum(dim=1) / (targets != -100).sum(dim=1).clamp(min=1)

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self._shard_loss(logits, targets) if self.data == "shards" else self._per_sample_loss(logits, targets)

    def training_step(self, batch, batch_idx):
        x, y = self._inputs_targets(batch)
        return self._loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = self._inputs_targets(batch)
        logits = self(x)
        loss = self._loss(logits, y)
        bits = "bits_per_token" if self.data == "shards" else "bits_per_byte"  # a BPE token is several bytes
        return {"loss": loss, bits: loss / math.log(2), "accuracy": (logits.argmax(dim=-1) == y).float().mean(dim=1)}

    def total_steps(self) -> int:
        """Optimizer steps in the whole run (the schedule's length)."""
        if self.data == "shards":
            return self.trainer.estimated_stepping_batches
        batches = math.ceil(self.train_windows / self.batch_size)
        return self.epochs * math.ceil(batches / self.accumulate_grad_batches)

    def lr_factor(self, step: int) -> float:
        """Multiplier of `lr` at optimizer step `step`: 0 -> 1 linearly, then cosine to 0."""
        total = self.total_steps()
        if step < self.warmup_steps:
            return step / self.warmup_steps
        progress = min((step - self.warmup_steps) / max(total - self.warmup_steps, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def configure_optimizers(self):
        # Weight decay only on the blocks' Linear matrices. Not on LayerNorm gains (decay
        # pulls them to 0, not to the identity 1) nor biases (few, and they only shift), nor
        # the embeddings: the tied byte embedding is also the output layer, and a rare
        # byte's row would shrink on every step while its gradient arrives only rarely.
        decay = {id(m.weight): m.weight for m in self.blocks.modules() if isinstance(m, nn.Linear)}
        rest = [p for p in self.parameters() if id(p) not in decay]  # parameters() dedups the tie
        optimizer = torch.optim.AdamW(
            [{"params": list(decay.values()), "weight_decay": self.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=self.lr, betas=(0.9, 0.95),
        )
        if self.schedule == "epoch_cosine":
            # For engines that step schedulers once per epoch: cosine over epochs from lr to
            # lr/10, never 0 (a rate of exactly 0 trains nothing and compiles another graph).
            factor = lambda epoch: 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(epoch / self.epochs, 1.0)))  # noqa: E731
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, factor),
                                     "interval": "epoch"}}
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self.lr_factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def train_dataloader(self) -> DataLoader:
        self._train_set = TrainWindows(load_corpus().train, self.context, self.train_windows)
        generator = torch.Generator().manual_seed(self.shuffle_seed)
        return DataLoader(self._train_set, batch_size=self.batch_size, shuffle=True, generator=generator)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(ValWindows(load_corpus().val, self.context, self.val_windows), batch_size=self.batch_size)

    def on_fit_start(self) -> None:
        if self.data == "shards":
            log.info("bytelm on token shards: vocabulary %d, %d optimizer steps", self.tok_emb.num_embeddings,
                     self.total_steps())
            return
        corpus = load_corpus()
        self.baseline = bigram_baseline(corpus.train, ValWindows(corpus.val, self.context, self.val_windows))
        b = self.baseline
        log.info("bytelm data: %d training bytes (%d files), %d validation bytes (%d files); %d steps",
                 len(corpus.train), len(corpus.train_files), len(corpus.val), len(corpus.val_files),
                 self.total_steps())
        log.info("bigram baseline (add-%g): %.4f nats/byte = %.4f bits/byte; the bar (30%% below) is %.4f nats",
                 b["k"], b["nats_per_byte"], b["bits_per_byte"], 0.7 * b["nats_per_byte"])

    def on_train_epoch_start(self) -> None:
        if self._train_set is not None:
            self._train_set.set_epoch(self.current_epoch + 1)  # 1-based, as the logs number epochs

    def on_validation_epoch_end(self) -> None:
        metrics = self.trainer.callback_metrics
        if self.baseline and "val_loss" in metrics:
            val_loss = float(metrics["val_loss"])
            below = 1.0 - val_loss / self.baseline["nats_per_byte"]
            log.info("epoch %d: val_loss %.4f nats/byte, %.1f%% below the bigram's %.4f",
                     self.current_epoch + 1, val_loss, 100 * below, self.baseline["nats_per_byte"])
