"""Training, evaluation and deployment of the operators, and the ``sciattn`` command line.

The package is grouped by job (the map, with one line per module, is in ``docs/design.md``):

* :mod:`.training`: the :class:`Trainer`, end-to-end runs (:func:`train_run`, :func:`evaluate_run`),
  checkpoints and resume, losses, mixed precision, batching, ``torch.distributed``, metric logs.
* :mod:`.datasets`: the data a run uses: a ``[data] train`` string mapped to a catalogue record, the train
  and test sets, their statistics, and what a run records about them.
* :mod:`.analysis`: resolution sweeps (and their data), autoregressive rollouts, area-weighted errors, figures.
* :mod:`.deployment`: exported programs (:func:`export_run`, :func:`load_program`) and the in-process
  :class:`Surrogate`.
* at the top: :mod:`.config` (the typed run config every job reads), :mod:`.cli` (``sciattn ...``, also
  ``python -m sciattn.train.cli``) and :mod:`.demo` (``sciattn demo`` with ``demo.toml``).

The flat module paths of before the grouping (``sciattn.train.trainer``, ``sciattn.train.export``, ...) keep
working and give the same module objects: one import finder with one table (:mod:`._aliases`), rather than a thin
alias file per old module, so ``train/`` lists its jobs only and the old names are retired in one place.
"""

from . import _aliases
from .analysis.sweep import resolution_sweep
from .config import ConfigError, DataConfig, RunConfig, TrainConfig, load_config
from .datasets.run_metadata import collect_data_meta, read_data_meta
from .training.checkpoint import load_checkpoint, load_model, save_checkpoint
from .training.run import count_parameters, evaluate_run, train_run
from .training.trainer import Trainer, evaluate_dataset

__all__ = [
    "ConfigError", "DataConfig", "RunConfig", "Surrogate", "TrainConfig", "Trainer", "collect_data_meta",
    "count_parameters", "evaluate_dataset", "evaluate_run", "export_run", "load_checkpoint", "load_config",
    "load_model", "load_program", "read_data_meta", "resolution_sweep", "save_checkpoint", "train_run",
]

_aliases.install(__name__)

# Imported on first use, so ``import sciattn.train`` does not pull in xarray (Surrogate) or the exporter.
_LAZY = {"Surrogate": ".deployment.surrogate", "NonFiniteStateError": ".deployment.surrogate",
         "export_run": ".deployment.export", "load_program": ".deployment.program"}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    if name in _aliases.MOVED:  # an old module path, e.g. ``sciattn.train.trainer`` after ``import sciattn.train``
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
