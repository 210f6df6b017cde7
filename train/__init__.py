"""Training and evaluation: configs, trainer, checkpoints, CLI, plots."""

from .checkpoint import load_checkpoint, load_model, save_checkpoint
from .config import ConfigError, DataConfig, RunConfig, TrainConfig, load_config
from .run import count_parameters, evaluate_run, train_run
from .sweep import resolution_sweep
from .trainer import Trainer, evaluate_dataset

__all__ = [
    "ConfigError", "DataConfig", "RunConfig", "TrainConfig", "Trainer", "count_parameters", "evaluate_dataset",
    "evaluate_run", "load_checkpoint", "load_config", "load_model", "resolution_sweep", "save_checkpoint", "train_run",
]
