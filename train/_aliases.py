"""The module paths ``sciattn.train`` had before it was grouped by job, kept working as aliases.

Before that grouping every module of ``sciattn.train`` sat flat in ``train/`` (``sciattn.train.trainer``,
``sciattn.train.export``, ...). They now live in the sub-package of their job (:data:`MOVED`). An old path
imports **the same module object** as the new one, not a copy, so ``sciattn.train.trainer is
sciattn.train.training.trainer``, and a monkeypatch of ``sciattn.train.run.build_datasets`` patches what
``train_run`` calls.

How: :class:`AliasFinder`, appended to :data:`sys.meta_path` by ``sciattn.train``'s ``__init__``, answers only
for ``sciattn.train.<old name>`` (every other finder has declined it by then, as no such file exists). Its loader
imports the module's new path and hands that module back as the old name's module; the import system then
records it in :data:`sys.modules` under the old name and sets the package attribute. The new module keeps its own
``__spec__`` and ``__name__``, so pickling, ``importlib.reload`` and the API reference see one name per module. The
package's ``__getattr__`` does the same for attribute access (``sciattn.train.trainer`` after only
``import sciattn.train``).

One finder with one table, rather than 21 thin alias files beside the sub-packages: ``train/`` lists its
jobs and nothing else, and the old names are documented (and can be retired) in one place.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

#: old module name inside ``sciattn.train`` -> its path now, relative to ``sciattn.train``
MOVED: dict[str, str] = {
    # training: fit a model and keep its run directory
    "trainer": "training.trainer",
    "train_state": "training.train_state",
    "checkpoint": "training.checkpoint",
    "losses": "training.losses",
    "precision": "training.precision",
    "batching": "training.batching",
    "distributed": "training.distributed",
    "loggers": "training.loggers",
    "evaluation": "training.evaluation",
    "run": "training.run",
    # datasets: the data a run trains and is evaluated on, and what the run records about it
    "sources": "datasets.sources",
    "data": "datasets.data",
    "data_stats": "datasets.data_stats",
    "run_metadata": "datasets.run_metadata",
    # analysis: resolution sweeps, rollouts, area-weighted errors, figures
    "sweep": "analysis.sweep",
    "sweep_data": "analysis.sweep_data",
    "rollout": "analysis.rollout",
    "area_metrics": "analysis.area_metrics",
    "plots": "analysis.plots",
    # deployment: exported programs and the in-process surrogate
    "export": "deployment.export",
    "surrogate": "deployment.surrogate",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, package: str, name: str):
        self.package, self.name = package, name
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec):
        module = importlib.import_module(f"{self.package}.{MOVED[self.name]}")
        self._spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system stamped the alias's spec on the module; give it back its own.
        module.__spec__ = self._spec


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``package.<old name>`` for the names in :data:`MOVED`, and nothing else."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if parent != self.package or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(parent, name))


def install(package: str) -> None:
    """Append the finder for ``package``'s old names to :data:`sys.meta_path`, once."""
    if not any(isinstance(f, AliasFinder) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(AliasFinder(package))
