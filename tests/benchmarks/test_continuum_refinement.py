"""benchmarks/continuum_refinement.py: on a small refinement, the ViTNO with physical patches converges faster than
the published patch side in points, and bad forms and sizes are refused by name."""

from __future__ import annotations

import pytest

from benchmarks import continuum_refinement as cr
from benchmarks import harness


def test_physical_patches_converge_and_points_do_not(tmp_path):
    records = harness.run_benchmark("continuum_refinement", quick=True, results=tmp_path, command="pytest",
                                    overrides={"sizes": [16, 32], "reference": 64, "patch_size": 8})
    rows = {(r["row"]["operator"], r["row"]["form"], r["row"]["n"]): r["row"] for r in records}
    phys, pts = rows[("continuum_vitno", "physical", 32)], rows[("continuum_vitno", "points", 32)]
    assert phys["patches"] == 4 and pts["patches"] == 4 and rows[("continuum_vitno", "points", 16)]["patches"] == 2
    assert phys["e"] < 0.3 * pts["e"] and phys["ratio"] < 0.8  # 16 cells: 4-point patches hold 2 of 4 modes


def test_bad_form_and_sizes_are_named():
    with pytest.raises(ValueError, match="forms"):
        cr.config("vitno", 16)
    with pytest.raises(ValueError, match="sizes"):
        cr.run({**cr.PARAMS, "sizes": [24], "forms": ["continuum_vitno points"]})
