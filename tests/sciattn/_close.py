"""Shared by the tests of the chunked backends: the comparison of a result with its float64 reference relative to the
reference's largest entry."""

from __future__ import annotations

import torch


def assert_close_scaled(got: torch.Tensor, want: torch.Tensor, what: str, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    """``got`` finite and ``|got − want| − rtol·|want| <= atol·max|want|`` everywhere (in float64), else an assertion
    naming ``what`` and the error."""
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    scale = float(want.abs().max().clamp_min(1e-12))
    err = float(((got - want).abs() - rtol * want.abs()).max())
    assert err <= atol * scale, f"{what}: error {err:.3g} above {atol}·{scale:.3g}"
