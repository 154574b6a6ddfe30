"""The default job: an MLP on scikit-learn's bundled 8x8 handwritten digits.

Real data that ships inside a PyPI package (1,797 images, 10 classes), so it trains
anywhere without a download. 80/20 stratified split with a fixed seed: 1,437 training
images, i.e. a ragged last batch at any batch size that is a power of two, which
exercises the engine's padding and masking on every epoch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer.module import TrainModule


def digits_datasets(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        images / 16.0, labels, test_size=0.2, stratify=labels, random_state=seed
    )

    def dataset(x, y) -> TensorDataset:
        return TensorDataset(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long))

    return dataset(x_train, y_train), dataset(x_val, y_val)


class DigitsClassifier(TrainModule):
    def __init__(self, hidden: int = 256, lr: float = 3e-3, weight_decay: float = 1e-4,
                 batch_size: int = 64, data_seed: int = 0, shuffle_seed: int = 0):
        super().__init__()
        self.lr, self.weight_decay, self.batch_size = lr, weight_decay, batch_size
        self.data_seed, self.shuffle_seed = data_seed, shuffle_seed
        self.net = nn.Sequential(
            nn.Linear(64, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y, reduction="none")

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        return {
            "loss": F.cross_entropy(logits.float(), y, reduction="none"),
            "accuracy": (logits.argmax(dim=-1) == y).float(),
        }

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return optimizer

    def train_dataloader(self) -> DataLoader:
        train, _ = digits_datasets(self.data_seed)
        generator = torch.Generator().manual_seed(self.shuffle_seed)
        return DataLoader(train, batch_size=self.batch_size, shuffle=True, generator=generator)

    def val_dataloader(self) -> DataLoader:
        _, val = digits_datasets(self.data_seed)
        return DataLoader(val, batch_size=self.batch_size)
