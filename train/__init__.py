"""Training and evaluation: configs, trainer, checkpoints, CLI, plots."""

from .checkpoint import load_checkpoint, load_model, save_checkpoint
from .config import ConfigError, DataConfig, RunConfig, TrainConfig, load_config
from .run import count_parameters, evaluate_run, train_run
from .run_metadata import collect_data_meta, read_data_meta
from .sweep import resolution_sweep
from .trainer import Trainer, evaluate_dataset

__all__ = [
    "ConfigError", "DataConfig", "RunConfig", "Surrogate", "TrainConfig", "Trainer", "collect_data_meta",
    "count_parameters", "evaluate_dataset", "evaluate_run", "export_run", "load_checkpoint", "load_config",
    "load_model", "load_program", "read_data_meta", "resolution_sweep", "save_checkpoint", "train_run",
]

# Imported on first use, so ``import sciattn.train`` does not pull in xarray (Surrogate) or the exporter.
_LAZY = {"Surrogate": ".surrogate", "NonFiniteStateError": ".surrogate", "export_run": ".export", "load_program": ".export"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
