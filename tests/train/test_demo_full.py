"""The full `sciattn demo` run (minutes): zero-shot error at 128 within 1.5x of the error at 32."""

from __future__ import annotations

import pytest

from sciattn.train.demo import run_demo


@pytest.mark.slow
def test_full_demo_is_resolution_invariant(tmp_path):
    metrics = run_demo(tmp_path / "demo", [f'data.cache_dir="{tmp_path}"'], progress=False, log=lambda m: None)
    errors = metrics["rel_l2_by_resolution"]
    assert set(errors) == {"32", "64", "128"}
    assert errors["32"] < 0.06
    assert errors["128"] <= 1.5 * errors["32"]
