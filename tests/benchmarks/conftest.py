"""Import a script of ``benchmarks/`` as a module (they import each other by bare name)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def import_benchmark():
    """``import_benchmark("name")`` -> the module ``benchmarks/name.py``; ``benchmarks/`` is on
    ``sys.path`` for the test module's lifetime."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCH))
