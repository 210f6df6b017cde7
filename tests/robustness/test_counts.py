"""The size of the robustness suite (issue 23): prints ``robustness cases: N (functionals a, ...)``
(visible with ``-s``) and asserts at least 200 table-driven cases."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_cli_surrogate_export  # noqa: E402
import test_functionals  # noqa: E402
import test_layers  # noqa: E402
import test_operators  # noqa: E402

AREAS = ("functionals", "layers", "operators", "readers", "config", "cli", "surrogate", "export")


def test_robustness_case_counts():
    cases = [c for m in (test_functionals, test_layers, test_operators, test_cli_surrogate_export) for c in m.CASES]
    counts = Counter(c.area for c in cases)
    assert set(counts) == set(AREAS), counts
    print(f"\nrobustness cases: {len(cases)} ({', '.join(f'{a} {counts[a]}' for a in AREAS)})")
    assert len(cases) >= 200
    assert all(counts[a] for a in AREAS)
