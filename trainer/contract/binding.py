"""One fit's side of the module contract, checked before any XLA work and attached while it runs.

`ModuleContract(...)` refuses what the engine does not run (`trainer.contract.lightning`)
and hook signatures it cannot call (`trainer.contract.hooks`) in milliseconds, before
torch_xla starts. `attached()` then gives the module its `self.trainer` and `self.log`
for the length of the fit, and takes them back at the end.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

from trainer.contract.data import FitData
from trainer.contract.hooks import Hooks
from trainer.contract.lightning import check_supported, is_datamodule, is_lightning_module
from trainer.contract.lightning_log import LightningTrainerView
from trainer.contract.trainer_view import FitFacts, TrainerView
from trainer.fit.step_logs import StepLogs, attached

log = logging.getLogger(__name__)


class ModuleContract:
    def __init__(self, module: Any, config: Any, datamodule: Any = None, train_loader: Any = None,
                 val_loader: Any = None):
        """`config`: the job's TrainerConfig. Raises UserError for what the engine cannot run."""
        check_supported(module)
        self.module, self.datamodule = module, datamodule
        self.lightning = is_lightning_module(module)
        self.hooks = Hooks(module)
        self.data = FitData(module, self.hooks, datamodule, train_loader, val_loader)
        self.facts = FitFacts(config, module, datamodule)
        self.logs = StepLogs()
        self.view = LightningTrainerView(self.facts, self.logs) if self.lightning else TrainerView(self.facts)
        self.logs.view = self.view
        self.hooks.logs = self.logs

    @contextlib.contextmanager
    def attached(self) -> Iterator["ModuleContract"]:
        """The module's self.trainer / self.log work inside; afterwards it reads back as the user left it."""
        module, dm = self.module, self.datamodule
        if self.lightning:
            module.trainer = self.view  # Lightning's contract: the trainer is assigned to the module
        if is_datamodule(dm):
            dm.trainer = self.view
        try:
            with attached(module, self.logs):
                yield self
        finally:
            self.hooks.leave()
            if self.lightning:
                module.trainer = None
            if is_datamodule(dm):
                dm.trainer = None
