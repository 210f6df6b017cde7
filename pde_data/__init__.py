"""Benchmark readers, PDE solvers that generate data, and normalisers.

``load(name_or_path, split=..., resolution=..., root=...)`` is the one entry point;
``list_benchmarks()`` lists the registered names (``sciattn data list`` prints them).

The folder, by job (``docs/design.md`` draws the map):

- the dataset catalogue, at the top: :mod:`.catalogue` (one ``Record`` per dataset) and its records,
  :mod:`.benchmarks` (named real files), :mod:`.formats` (file detection), :mod:`.generators` (built-in solvers,
  with :mod:`.presets`), :mod:`.downloads`; and what reads it: :mod:`.registry` (``load``), :mod:`.fetch`,
  :mod:`.generate` (``sciattn data generate``), :mod:`.generated_pairs`; :mod:`.grid_dataset` is the sample
  container the readers and generators return;
- ``readers/``: one file format or published layout per file;
- ``solvers/``: the PDE solvers that generate data, one per file (``solvers/shallow_water/``: solver and dataset);
- ``transforms/``: normalisers, train/test splits, grid-to-point-set sampling.

The modules' flat paths from before this grouping (``sciattn.pde_data.darcy``, ...) still import, as the same
module objects: see :mod:`._aliases`.
"""

import importlib as _importlib

from . import _aliases
from . import benchmarks as _benchmarks  # noqa: F401  (registers the named real-file datasets)
from . import formats as _formats  # noqa: F401  (registers the file formats)
from . import generators as _generators  # noqa: F401  (registers the built-in generators)
from .registry import BENCHMARKS, default_root, list_benchmarks, load

_aliases.install(__name__)

__all__ = ["BENCHMARKS", "default_root", "list_benchmarks", "load"]


def __getattr__(name: str):
    """``sciattn.pde_data.<old name>`` as an attribute, before anything imported it (:mod:`._aliases`)."""
    if name in _aliases.MOVED:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
