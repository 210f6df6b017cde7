"""The quadrature-weight and mask policy (``sciattn._checks.check_quadrature_weights``).

At real (unmasked) points weights must be finite and ``>= 0``, else ``ValueError`` naming the
argument, what was expected and the first offending value and index. Padded points may hold
anything. Attentions that divide by the total weight (Galerkin, codomain) also need a positive
total and at least one real point per sample; the softmax family returns zeros for a query
with no admissible key instead. Value checks are skipped under ``torch.compile`` tracing.
"""

from __future__ import annotations

import math

import pytest
import torch

from sciattn._checks import check_quadrature_weights
from sciattn.codomain import codomain_attention
from sciattn.galerkin import galerkin_attention
from sciattn.multipole.functional import window_attention
from sciattn.neighborhood import csr_from_pairs, neighborhood_attention
from sciattn.weighted_softmax import weighted_softmax_attention

F64 = torch.float64
B, H, N, D = 2, 1, 6, 3


def _qkv(n=N):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, n, D, generator=g, dtype=F64) for _ in range(3))


def _full_csr(n=N):
    rows, cols = torch.ones(n, n, dtype=torch.bool).nonzero(as_tuple=True)
    return csr_from_pairs(rows, cols, n)


def _codomain(weights):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, 2, N, D, generator=g, dtype=F64) for _ in range(3))
    return codomain_attention(q, k, v, weights=weights)


def _window(weights, mask=None):
    q, k, v = _qkv()
    return window_attention(q, k, v, 3, weights=weights, mask=mask)


# (functional, call(weights, mask)) for every public functional that takes weights
FUNCTIONALS = {
    "galerkin": lambda w, m: galerkin_attention(*_qkv(), weights=w, mask=m),
    "weighted_softmax": lambda w, m: weighted_softmax_attention(*_qkv(), w, m),
    "neighborhood": lambda w, m: neighborhood_attention(*_qkv(), *_full_csr(), w, m),
    "window": lambda w, m: _window(w, m),
    "codomain": lambda w, m: _codomain(w),  # no point mask: every point is real
}
MASKED = [f for f in FUNCTIONALS if f != "codomain"]


def _weights(value, at=(0, 3)):
    w = torch.rand(B, N, dtype=F64) + 0.1
    w[at] = value
    return w


@pytest.mark.parametrize("fn", list(FUNCTIONALS))
@pytest.mark.parametrize("value,shown", [(-0.5, "-0.5"), (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf")])
def test_bad_weight_at_a_real_point_is_a_value_error_with_value_and_index(fn, value, shown):
    with pytest.raises(ValueError) as err:
        FUNCTIONALS[fn](_weights(value), None)
    msg = str(err.value)
    assert msg.startswith("weights: expected non-negative finite values"), msg
    assert f"got {shown} at index (0, 3)" in msg, msg


@pytest.mark.parametrize("fn", MASKED)
def test_bad_weights_at_padded_points_are_ignored(fn):
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 3:] = False
    w = _weights(-0.5)
    w[0, 4], w[0, 5] = math.nan, -math.inf
    out = FUNCTIONALS[fn](w, mask)
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"at unmasked points, got -0.5 at index \(1, 2\)"):
        FUNCTIONALS[fn](_weights(-0.5, at=(1, 2)), mask)


def test_shared_one_d_weights_report_a_one_d_index():
    w = torch.rand(N, dtype=F64) + 0.1
    w[4] = -2.0
    with pytest.raises(ValueError, match=r"weights: expected non-negative finite values at every point, got -2.0 at index \(4,\)"):
        galerkin_attention(*_qkv(), weights=w)


@pytest.mark.parametrize("fn", ["galerkin", "codomain"])
def test_normalising_attentions_need_a_positive_total_weight_per_sample(fn):
    w = torch.rand(B, N, dtype=F64) + 0.1
    w[1] = 0.0
    with pytest.raises(ValueError) as err:
        FUNCTIONALS[fn](w, None)
    msg = str(err.value)
    assert msg.startswith("weights: expected a positive total weight") and "got 0.0 in sample 1" in msg, msg


def test_galerkin_zero_weight_on_every_real_point_is_an_error_even_if_padding_has_weight():
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 2:] = False
    w = torch.rand(B, N, dtype=F64) + 0.1
    w[0, :2] = 0.0
    with pytest.raises(ValueError, match=r"weights: expected a positive total weight at unmasked points .* sample 0"):
        galerkin_attention(*_qkv(), weights=w, mask=mask)


def test_galerkin_all_false_mask_is_an_error_naming_the_sample():
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1] = False
    for w in (None, torch.rand(B, N, dtype=F64)):
        with pytest.raises(ValueError, match=r"mask: expected at least one True entry \(real point\) per sample, got none in sample 1 of 2"):
            galerkin_attention(*_qkv(), weights=w, mask=mask)


@pytest.mark.parametrize("fn", ["weighted_softmax", "neighborhood", "window"])
def test_softmax_family_returns_zeros_for_a_sample_without_admissible_keys(fn):
    """Zero weights and all-False masks are allowed there: the documented output is zeros."""
    w = torch.rand(B, N, dtype=F64) + 0.1
    w[1] = 0.0
    out = FUNCTIONALS[fn](w, None)
    assert torch.isfinite(out).all() and torch.equal(out[1], torch.zeros_like(out[1]))
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0] = False
    out = FUNCTIONALS[fn](torch.rand(B, N, dtype=F64), mask)
    assert torch.equal(out[0], torch.zeros_like(out[0]))


def test_zero_weights_are_allowed_and_remove_points():
    w = torch.rand(B, N, dtype=F64) + 0.1
    w[:, -1] = 0.0
    q, k, v = _qkv()
    full = galerkin_attention(q, k, v, weights=w)
    k2, v2 = k.clone(), v.clone()
    k2[..., -1, :], v2[..., -1, :] = 5.0, -5.0
    torch.testing.assert_close(galerkin_attention(q, k2, v2, weights=w), full, rtol=1e-13, atol=1e-13)


def test_neighborhood_validate_false_skips_the_weight_check():
    """Layers with a cached index pass validate=False to avoid host syncs; the weights check is
    part of that validation."""
    out = neighborhood_attention(*_qkv(), *_full_csr(), _weights(-0.5), validate=False)
    assert out.shape == (B, H, N, D)


def test_helper_is_skipped_while_compiling(monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    w = torch.tensor([-1.0, math.nan])
    assert check_quadrature_weights("weights", w, need_mass=True) is w


def test_helper_names_the_argument():
    with pytest.raises(ValueError, match=r"^cell_areas: expected non-negative finite values at every point, got -1.0 at index \(0,\)"):
        check_quadrature_weights("cell_areas", torch.tensor([-1.0, 2.0]))
    with pytest.raises(ValueError, match=r"^valid: expected at least one True entry"):
        check_quadrature_weights("w", torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool), need_mass=True,
                                 mask_name="valid")
