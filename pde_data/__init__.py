"""Benchmark readers, PDE solvers that generate data, and normalisers.

``load(name_or_path, split=..., resolution=..., root=...)`` is the one entry point;
``list_benchmarks()`` lists the registered names (``sciattn data list`` prints them).
"""

from . import benchmarks as _benchmarks  # noqa: F401  (registers the named real-file datasets)
from . import formats as _formats  # noqa: F401  (registers the file formats)
from . import generators as _generators  # noqa: F401  (registers the built-in generators)
from .registry import BENCHMARKS, default_root, list_benchmarks, load

__all__ = ["BENCHMARKS", "default_root", "list_benchmarks", "load"]
