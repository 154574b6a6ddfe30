"""tpu-trainer: a PyTorch/XLA training engine. `from trainer import Trainer, TrainModule`.

Imports are lazy so that config parsing and validation (`trainer.config`,
`trainer.runtime.startup` planning) never pay for importing torch.
"""
from trainer import moved
from trainer.errors import UserError

moved.install()  # `trainer.loop`, `trainer.session`, ... keep resolving at their new homes

__all__ = ["Trainer", "TrainModule", "FitResult", "TrainingInterrupted", "UserError", "seed_everything",
           "notebook_launch"]


def __getattr__(name: str):
    if name == "Trainer":
        from trainer.engine import Trainer

        return Trainer
    if name == "FitResult":
        from trainer.fit.session import FitResult

        return FitResult
    if name == "seed_everything":  # call before building the model: same seed, same initial weights
        from trainer.runtime.seeding import seed_everything

        return seed_everything
    if name == "TrainingInterrupted":  # fit() stopped by SIGTERM/SIGINT after saving a checkpoint
        from trainer.fit.preemption import TrainingInterrupted

        return TrainingInterrupted
    if name == "TrainModule":
        from trainer.module import TrainModule

        return TrainModule
    if name == "notebook_launch":  # train from a Jupyter kernel in a fresh child process
        from trainer.runtime.notebook import notebook_launch

        return notebook_launch
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
