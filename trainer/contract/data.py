"""Where a fit's batches come from, in Lightning's order.

    prepare_data   the datamodule's, then the module's (download / write once)
    setup("fit")   the datamodule's, then the module's (build datasets, split them)
    loaders        after on_fit_start: the DataLoaders passed to fit(), else the
                   datamodule's train_dataloader() / val_dataloader(), else the module's
    teardown       the datamodule's, then the module's teardown("fit")

The train loader is made once; `estimated_stepping_batches` asked inside
configure_optimizers makes it early (as in Lightning), and it is not made twice.
"""
from __future__ import annotations

import logging
from typing import Any

from trainer.contract.lightning import overrides
from trainer.errors import UserError

log = logging.getLogger(__name__)


class FitData:
    def __init__(self, module: Any, hooks: Any, datamodule: Any = None, train_loader: Any = None,
                 val_loader: Any = None):
        self.module, self.hooks, self.datamodule = module, hooks, datamodule
        self._given = (train_loader, val_loader)
        self._train: Any = None
        self._val: Any = ...
        if datamodule is not None and not callable(getattr(datamodule, "train_dataloader", None)):
            raise UserError(f"datamodule={type(datamodule).__name__} has no train_dataloader(); pass a "
                            "LightningDataModule (prepare_data, setup, train_dataloader, val_dataloader).")

    def default_to(self, train_loader: Any, val_loader: Any) -> None:
        """Loaders to use where fit() was given none (a job's token shards): before the module's own."""
        given_train, given_val = self._given
        self._given = (given_train if given_train is not None else train_loader,
                       given_val if given_val is not None else (val_loader if given_train is None else None))

    def prepare(self) -> None:
        """prepare_data, then setup("fit"): the datamodule first, as in Lightning."""
        dm = self.datamodule
        if dm is not None and callable(getattr(dm, "prepare_data", None)):
            dm.prepare_data()
        self.hooks.call("prepare_data")
        if dm is not None and callable(getattr(dm, "setup", None)):
            dm.setup("fit")
        self.hooks.call("setup", "fit")

    def train_loader(self) -> Any:
        if self._train is None:
            self._train = self._given[0]
            if self._train is None:
                self._train = self._from_method("train_dataloader", required=True)
        return self._train

    def val_loader(self) -> Any:
        """The validation loader, or None (none given, none defined, or no validation_step to run it)."""
        if self._val is ...:
            loader = self._given[1]
            if loader is None:
                loader = self._from_method("val_dataloader", required=False)
            if loader is not None and not overrides(self.module, "validation_step"):
                log.warning("a validation DataLoader was given, but %s defines no validation_step: no validation "
                            "runs", type(self.module).__name__)
                loader = None
            self._val = _one_loader(loader)
        return self._val

    def teardown(self) -> None:
        dm = self.datamodule
        if dm is not None and callable(getattr(dm, "teardown", None)):
            dm.teardown("fit")
        self.hooks.call("teardown", "fit")

    def _from_method(self, name: str, required: bool) -> Any:
        dm = self.datamodule
        if dm is not None and overrides(dm, name):
            return getattr(dm, name)()
        if overrides(self.module, name):
            return getattr(self.module, name)()
        if required:
            kind = type(self.module).__name__
            raise UserError(
                f"no training data: Trainer.fit({kind}) got no train_dataloaders and no datamodule, and {kind} "
                "defines no train_dataloader(). Fix: pass a DataLoader (trainer.fit(module, train_loader)), a "
                "datamodule (trainer.fit(module, datamodule=dm)), or define train_dataloader() in the module.")
        return None


def _one_loader(loader: Any) -> Any:
    if isinstance(loader, (list, tuple)):
        if len(loader) != 1:
            raise UserError(f"val_dataloader() returned {len(loader)} DataLoaders; tpu-trainer validates on one. "
                            "Fix: return one DataLoader (concatenate the datasets if need be).")
        return loader[0]
    if isinstance(loader, dict):
        raise UserError("val_dataloader() returned a dict of DataLoaders; tpu-trainer validates on one. Fix: "
                        "return one DataLoader.")
    return loader
