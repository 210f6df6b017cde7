"""The repository's registered benchmarks, discovered from the modules of this package.

Every module of ``benchmarks/`` that runs a benchmark declares them as ``BENCHMARKS``, a tuple of
:class:`benchmarks.harness.Benchmark`; :func:`load` imports each module and registers what it
declares. Modules whose names start with ``_`` are shared helpers, and :data:`INFRASTRUCTURE` are the
harness itself. The heavy imports of a benchmark happen inside its ``run``, so ``python -m benchmarks
list`` is quick. A module that declares nothing is listed by :func:`unregistered` (a test keeps that
list empty: every benchmark runs through the one harness).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from .harness import register

PACKAGE = Path(__file__).resolve().parent
INFRASTRUCTURE = frozenset({"__main__", "harness", "registry", "readme_tables"})


def modules() -> list[str]:
    """The benchmark modules of the package (not the helpers ``_*`` nor :data:`INFRASTRUCTURE`), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)])
                  if not m.name.startswith("_") and m.name not in INFRASTRUCTURE)


def _declares(name: str) -> bool:
    """Whether module ``name``'s source assigns ``BENCHMARKS`` at top level (read, not imported)."""
    return any(line.startswith("BENCHMARKS") for line in (PACKAGE / f"{name}.py").read_text().splitlines())


def unregistered() -> list[str]:
    """The benchmark modules that declare no ``BENCHMARKS`` (they are not imported)."""
    return [name for name in modules() if not _declares(name)]


def load() -> None:
    """Import every benchmark module that declares ``BENCHMARKS`` and register them."""
    for name in modules():
        if _declares(name):
            for bench in importlib.import_module(f"{__package__}.{name}").BENCHMARKS:
                register(bench)


load()
