"""TrainModules used by the checkpoint, resume and preemption tests (loaded with --module).

They compute exactly what `DigitsClassifier` computes (plus dropout, to exercise the XLA
RNG); the extras only change timing or checkpoint size, so a test can signal a process
mid-epoch or kill it in the middle of a large write.
"""
from __future__ import annotations

import logging
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer.examples.digits import DigitsClassifier
from trainer.module import TrainModule


class SlowDigits(DigitsClassifier):
    """Digits with dropout (XLA RNG) and a host-side pause per step (tracing time only)."""

    def __init__(self, step_sleep: float = 0.0, dropout: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.step_sleep = step_sleep
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.drop(x))

    def training_step(self, batch, batch_idx):
        if self.step_sleep:
            time.sleep(self.step_sleep)
        return super().training_step(batch, batch_idx)


class Big(SlowDigits):
    """SlowDigits plus a large persistent buffer: every checkpoint is `megabytes` large."""

    def __init__(self, megabytes: int = 256, **kwargs):
        super().__init__(**kwargs)
        self.register_buffer("ballast", torch.zeros(megabytes * 2**18))  # float32: 4 bytes each


class TinyGPT2(TrainModule):
    """A 2-layer Hugging Face GPT-2 built from a config (no download), on real text: bytes of
    the standard library's own sources. Its lm_head is tied to the token embedding."""

    def __init__(self, context: int = 32, batch_size: int = 16, batches: int = 12, lr: float = 3e-3):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=256, n_positions=context, n_embd=64, n_layer=2, n_head=4,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        self.model = GPT2LMHeadModel(config)
        self.context, self.batch_size, self.batches, self.lr = context, batch_size, batches, lr

    def _loss(self, batch):
        tokens = batch[0]
        logits = self.model(input_ids=tokens[:, :-1]).logits
        return F.cross_entropy(logits.transpose(1, 2).float(), tokens[:, 1:], reduction="none").mean(dim=1)

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        return {"loss": self._loss(batch)}

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)

    def on_fit_start(self):
        tied = self.model.lm_head.weight is self.model.transformer.wte.weight
        logging.getLogger(__name__).info("lm_head tied to wte: %s", tied)

    def _windows(self, start: int) -> TensorDataset:
        import sysconfig
        from pathlib import Path

        text = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_bytes()
        n = self.batch_size * self.batches
        step = self.context + 1
        rows = [list(text[start + i * step: start + (i + 1) * step]) for i in range(n)]
        return TensorDataset(torch.tensor(rows, dtype=torch.long))

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(0)
        return DataLoader(self._windows(0), batch_size=self.batch_size, shuffle=True, generator=generator)

    def val_dataloader(self):
        return DataLoader(self._windows(40_000), batch_size=self.batch_size)


class HostReadsAndFallback(DigitsClassifier):
    """Digits with two classic slow-downs in its training step: a `.item()` (a host read every
    step) and `torch.nonzero` (its output shape depends on the data, so XLA runs it on the CPU)."""

    def training_step(self, batch, batch_idx):
        losses = super().training_step(batch, batch_idx)
        if losses.mean().item() > 1e6:  # the read a user writes to catch divergence
            raise RuntimeError("diverged")
        return losses + torch.nonzero(losses > 0).shape[0] * 0.0


class GrowingSequences(DigitsClassifier):
    """Sequences padded to the longest in each batch (a common collate): after epoch 1 the
    length grows from 8 to 12, a new input shape and so a new XLA graph."""

    def train_dataloader(self):
        from trainer.examples.digits import digits_datasets

        train, _ = digits_datasets(self.data_seed)
        images, labels = train.tensors

        def collate(rows):
            length = 8 if self.epoch_seen < 2 else 12
            x = torch.stack([images[i] for i in rows])
            y = torch.stack([labels[i] for i in rows])
            return {"x": x, "y": y, "tokens": torch.zeros(len(rows), length, dtype=torch.long)}

        return DataLoader(range(len(labels)), batch_size=self.batch_size, collate_fn=collate, drop_last=True)

    epoch_seen = 1

    def on_train_epoch_start(self):
        self.epoch_seen = self.current_epoch + 1  # 1-based, as the epochs are numbered in the logs

    def training_step(self, batch, batch_idx):
        logits = self(batch["x"]) + batch["tokens"].float().mean() * 0.0
        return F.cross_entropy(logits, batch["y"], reduction="none")

    def val_dataloader(self):
        return None


class SignalsItself(SlowDigits):
    """SlowDigits that sends itself a real SIGTERM at one batch of one epoch, so a test can place a
    preemption exactly (e.g. in the middle of a gradient-accumulation window)."""

    def __init__(self, signal_epoch: int = 0, signal_batch: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.signal_epoch, self.signal_batch, self.epoch = signal_epoch, signal_batch, 0

    def on_train_epoch_start(self):
        self.epoch = self.current_epoch + 1  # 1-based, as --set module_args.signal_epoch counts

    def training_step(self, batch, batch_idx):
        if (self.epoch, batch_idx) == (self.signal_epoch, self.signal_batch):
            import os
            import signal

            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)


class TinyBert(TrainModule):
    """A 2-layer Hugging Face BERT classifier built from a config, fed an attention mask: its
    mask helper reads the mask on the host (`.all()`) on every forward, a host sync the
    engine's detector must name."""

    def __init__(self, samples: int = 256, batch_size: int = 32, seq: int = 16):
        super().__init__()
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=seq, num_labels=2)
        self.model = BertForSequenceClassification(config)
        generator = torch.Generator().manual_seed(0)
        self.tokens = torch.randint(1, 64, (samples, seq), generator=generator)
        self.labels = (self.tokens == 7).any(dim=1).long()  # learnable: does token 7 occur?
        self.batch_size = batch_size

    def training_step(self, batch, batch_idx):
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return F.cross_entropy(out.logits, batch["labels"], reduction="none")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        rows = [{"input_ids": t, "attention_mask": torch.ones_like(t), "labels": y}
                for t, y in zip(self.tokens, self.labels)]
        return DataLoader(rows, batch_size=self.batch_size, shuffle=True, generator=torch.Generator().manual_seed(0))


class ShardsGPT2(TrainModule):
    """A 2-layer Hugging Face GPT-2 (from a config) for token shards: batches are
    {"input_ids", "labels"} as `TokenShards` gives them; the loss shifts labels itself."""

    def __init__(self, vocab_size: int = 257, context: int = 32, lr: float = 3e-3, step_sleep: float = 0.0):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=vocab_size, n_positions=context, n_embd=64, n_layer=2, n_head=4,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        self.model = GPT2LMHeadModel(config)
        self.lr, self.step_sleep = lr, step_sleep

    def _loss(self, batch):
        logits = self.model(input_ids=batch["input_ids"]).logits[:, :-1]
        labels = batch["labels"][:, 1:]
        nll = F.cross_entropy(logits.transpose(1, 2).float(), labels, reduction="none", ignore_index=-100)
        return nll.sum(dim=1) / (labels != -100).sum(dim=1).clamp(min=1)

    def training_step(self, batch, batch_idx):
        if self.step_sleep:
            import time

            time.sleep(self.step_sleep)
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        return {"loss": self._loss(batch)}

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


class ReadsInAHook(DigitsClassifier):
    """Digits with a host read in a traced hook: on_before_backward reads the loss to the host."""

    def on_before_backward(self, loss):
        if loss.item() > 1e6:  # the divergence check a user puts in a hook
            raise RuntimeError("diverged")
