"""Galerkin attention functional: against independent formulas, masks, weights, errors."""

from __future__ import annotations

import pytest
import torch

from sciattn import BackendError, galerkin_attention


def _dense_oracle(q, k, v, w, mask=None):
    """O(N²) quadrature Σ_j w_j (q_i·k_j) v_j / Σ_j w_j, written without the reference's reordering."""
    b, h, nq, _ = q.shape
    out = torch.zeros(b, h, nq, v.shape[-1], dtype=q.dtype)
    for bi in range(b):
        keep = torch.ones(k.shape[2], dtype=torch.bool) if mask is None else mask[bi]
        wb = w[bi] if w.dim() == 2 else w
        wk = wb[keep] / wb[keep].sum()
        for hi in range(h):
            scores = q[bi, hi] @ k[bi, hi][keep].T  # (nq, nk_real)
            out[bi, hi] = (scores * wk[None, :]) @ v[bi, hi][keep]
    return out


@pytest.mark.parametrize("nq,nk", [(7, 7), (5, 11), (13, 3)])
def test_matches_dense_oracle_nonuniform_weights(nq, nk):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, nq, 4, dtype=torch.float64, generator=g)
    k = torch.randn(2, 3, nk, 4, dtype=torch.float64, generator=g)
    v = torch.randn(2, 3, nk, 5, dtype=torch.float64, generator=g)
    w = torch.rand(2, nk, dtype=torch.float64, generator=g) + 0.1
    torch.testing.assert_close(galerkin_attention(q, k, v, weights=w), _dense_oracle(q, k, v, w), rtol=1e-12, atol=1e-12)


def test_uniform_default_is_cao_one_over_n():
    q, k, v = (torch.randn(1, 2, 9, 3, dtype=torch.float64) for _ in range(3))
    expected = q @ (k.transpose(-1, -2) @ v) / 9
    torch.testing.assert_close(galerkin_attention(q, k, v), expected)


def test_weights_are_normalised_so_scale_does_not_matter():
    q, k, v = (torch.randn(1, 1, 6, 2, dtype=torch.float64) for _ in range(3))
    w = torch.rand(6, dtype=torch.float64) + 0.5
    torch.testing.assert_close(galerkin_attention(q, k, v, weights=w), galerkin_attention(q, k, v, weights=7.0 * w))


def test_mask_with_nan_poisoned_padding_matches_unpadded():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 2, 5, 3, dtype=torch.float64, generator=g)
    k = torch.randn(2, 2, 8, 3, dtype=torch.float64, generator=g)
    v = torch.randn(2, 2, 8, 4, dtype=torch.float64, generator=g)
    w = torch.rand(2, 8, dtype=torch.float64, generator=g) + 0.1
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[0, 6:] = False
    mask[1, 3:] = False
    k_bad, v_bad, w_bad = k.clone(), v.clone(), w.clone()
    k_bad[~mask[:, None, :].expand(2, 2, 8)] = float("nan")
    v_bad[~mask[:, None, :].expand(2, 2, 8)] = float("inf")
    w_bad[~mask] = float("nan")
    out = galerkin_attention(q, k_bad, v_bad, weights=w_bad, mask=mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _dense_oracle(q, k, v, w, mask), rtol=1e-12, atol=1e-12)
    # Sample 1 alone, truncated to its 3 real points, gives the same answer.
    alone = galerkin_attention(q[1:], k[1:, :, :3], v[1:, :, :3], weights=w[1:, :3])
    torch.testing.assert_close(out[1:], alone)


def test_gradients_match_dense_oracle():
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(1, 2, 6, 3, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2))
    v = torch.randn(1, 2, 6, 2, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.rand(1, 6, dtype=torch.float64, generator=g) + 0.2
    grads = torch.autograd.grad(galerkin_attention(q, k, v, weights=w).square().sum(), (q, k, v))
    grads_ref = torch.autograd.grad(_dense_oracle(q, k, v, w).square().sum(), (q, k, v))
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(q=torch.randn(2, 3)), "q: expected a 4-D tensor"),
        (dict(v=torch.randn(1, 2, 5, 3)), "v: expected shape"),
        (dict(k=torch.randn(1, 2, 6, 5)), "q: expected shape"),
        (dict(weights=torch.rand(4)), r"weights: expected shape \(6,\) or \(1, 6\)"),
        (dict(mask=torch.ones(1, 5, dtype=torch.bool)), r"mask: expected shape \(1, 6\)"),
        (dict(mask=torch.ones(1, 6)), "mask: expected dtype torch.bool"),
        (dict(k=torch.randn(1, 2, 0, 3), v=torch.randn(1, 2, 0, 3)), "at least one key"),
    ],
)
def test_bad_input_names_the_argument(kwargs, match):
    args = dict(q=torch.randn(1, 2, 4, 3), k=torch.randn(1, 2, 6, 3), v=torch.randn(1, 2, 6, 3))
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        galerkin_attention(**args)


def test_forced_unknown_backend_lists_choices():
    q = torch.randn(1, 1, 3, 2)
    with pytest.raises(BackendError, match="backend: expected one of"):
        galerkin_attention(q, q, q, backend="nope")
