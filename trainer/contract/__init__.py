"""The module contract: Lightning's hooks, `self.trainer`, `self.log` and set-up order, for our
`TrainModule` and for an unchanged `LightningModule` / `LightningDataModule` (recognised by
name, never by importing Lightning)."""
