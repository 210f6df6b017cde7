"""Fastmax attention (``sciattn.multipole.fastmax``): the factorised moments against a float64 transcription of the
published forward (``_fastmax_published.py``, uniform weights: the published average) and against the dense matrix of
the same kernel (``fastmax_reference``) with quadrature weights, padding, ``Nq != Nk`` and gradients."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from sciattn.multipole import fastmax_attention, fastmax_dense
from sciattn.multipole.fastmax_reference import fastmax_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fastmax_published as pub  # noqa: E402

TOL = 1e-10


def _rel(a, b):
    return float((a - b).abs().max().detach() / b.abs().max().detach())


def _qkv(b=2, h=3, nq=11, nk=11, d=4, e=5, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(b, h, nq, d, generator=g, dtype=torch.float64),
            scale * torch.randn(b, h, nk, d, generator=g, dtype=torch.float64),
            torch.randn(b, h, nk, e, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_equals_the_published_forward(order, causal, normalize):
    q, k, v = _qkv()
    lim = 0.8 if order == 1 else 1.3  # order 1 needs |s| < 1 for a positive denominator
    if not normalize and order == 1:
        q, k = 0.2 * q, 0.2 * k
    ref = pub.published_fastmax(q, k, v, mask=causal, normalize=normalize, lim=lim, p=order)
    ours = fastmax_attention(q, k, v, order=order, normalize="max" if normalize else None, lim=lim, causal=causal)
    assert _rel(ours, ref) <= TOL
    # the kernel is not softmax's: the answer differs from softmax attention on the same scores
    qn, kn = (q, k) if not normalize else (lim * q / q.norm(dim=-1).amax(2, keepdim=True)[..., None],
                                         lim * k / k.norm(dim=-1).amax(2, keepdim=True)[..., None])
    soft = torch.nn.functional.scaled_dot_product_attention(qn, kn, v, is_causal=causal, scale=1.0)
    assert _rel(ours, soft) > 1e-4


def test_coefficients_and_the_published_attention_matrix():
    q, k, v = _qkv(nk=11, seed=1)
    mask01 = torch.randint(0, 2, (11, 11), generator=torch.Generator().manual_seed(2))
    mask01.fill_diagonal_(1)
    coeffs = dict(a0=0.7, a1=1.3, a2=0.4)
    ans, attn = pub.published_attn_matrix(q, k, v, temperature=2.0, **coeffs)
    ours = fastmax_attention(q, k, v, coefficients=(0.7, 1.3, 0.4), normalize=None, temperature=2.0)
    assert _rel(ours, ans) <= TOL
    mat = fastmax_matrix(q, k, coefficients=(0.7, 1.3, 0.4), normalize=None, temperature=2.0)
    assert _rel(mat, attn) <= TOL
    ans_c, _ = pub.published_attn_matrix(q, k, v, mask=torch.tril(torch.ones(11, 11)), **coeffs)
    ours_c = fastmax_attention(q, k, v, coefficients=(0.7, 1.3, 0.4), normalize=None, causal=True)
    assert _rel(ours_c, ans_c) <= TOL


@pytest.mark.parametrize("normalize", ["max", "token", None])
@pytest.mark.parametrize("order", [1, 2])
def test_weighted_padded_cross_attention_equals_the_dense_kernel(normalize, order):
    """Non-uniform weights, NaN-poisoned padding, ``Nq != Nk``: outputs and every gradient."""
    q, k, v = _qkv(nq=7, nk=13, seed=3, scale=0.3 if normalize is None else 1.0)
    g = torch.Generator().manual_seed(4)
    w = torch.rand(2, 13, generator=g, dtype=torch.float64) + 0.1
    mask = torch.ones(2, 13, dtype=torch.bool)
    mask[0, 9:] = False
    mask[1, 4] = False
    k, v, w = k.clone(), v.clone(), w.clone()
    k[0, :, 9:], v[1, :, 4], w[0, 9:] = float("nan"), float("inf"), float("nan")
    lim = 0.9
    tensors = [t.requires_grad_() for t in (q, k, v, w)]
    opts = dict(order=order, normalize=normalize, lim=lim)
    ours = fastmax_attention(*tensors[:3], tensors[3], mask, **opts)
    ref = fastmax_dense(*tensors[:3], tensors[3], mask, **opts)
    assert _rel(ours, ref) <= TOL
    go = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    grads = [torch.autograd.grad((out * go).sum(), tensors) for out in (ours, ref)]
    for a, b in zip(*grads):
        assert torch.isfinite(a).all()
        assert _rel(a, b) <= TOL
    blocked = fastmax_dense(q, k, v, w, mask, block=3, **opts)
    assert _rel(blocked, ref) <= TOL
    assert _rel(fastmax_attention(q, k, v, w, mask, chunk=4, **opts), ref) <= TOL  # chunks of 4 over 7 and 13


def test_self_attention_mask_indexes_the_queries_too():
    """With ``Nq == Nk`` the ``max`` normalisation of ``q`` ignores padded queries: the real rows equal the
    unpadded set's."""
    q, k, v = _qkv(nq=9, nk=9, seed=5)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[:, 6:] = False
    q2 = q.clone()
    q2[:, :, 6:] = 100.0  # a padded query with the largest norm
    padded = fastmax_attention(q2, k, v, mask=mask)
    alone = fastmax_attention(q[:, :, :6], k[:, :, :6], v[:, :, :6])
    assert _rel(padded[:, :, :6], alone) <= 1e-12


def test_weights_are_a_quadrature():
    """A key of weight 2 equals the key taken twice at weight 1; uniform weights equal no weights; the normalising
    denominator takes the weights (non-uniform weights change the answer)."""
    q, k, v = _qkv(nq=5, nk=6, seed=6)
    w = torch.ones(6, dtype=torch.float64)
    w[2] = 2.0
    twice = [torch.cat([t, t[:, :, 2:3]], dim=2) for t in (k, v)]
    assert _rel(fastmax_attention(q, k, v, w, normalize=None), fastmax_attention(q, *twice, normalize=None)) <= 1e-12
    assert _rel(fastmax_attention(q, k, v, torch.full((6,), 0.3, dtype=torch.float64)),
                fastmax_attention(q, k, v)) <= 1e-12
    assert _rel(fastmax_attention(q, k, v, w), fastmax_attention(q, k, v)) > 1e-3


def test_half_precision_accumulates_in_float32():
    q, k, v = _qkv(nq=300, nk=300, seed=8)
    ref = fastmax_attention(q, k, v, normalize=None)
    for dtype in (torch.float16, torch.bfloat16):
        out = fastmax_attention(*(t.to(dtype) for t in (q, k, v)), normalize=None)
        assert out.dtype == dtype
        assert _rel(out.double(), ref) < (2e-3 if dtype == torch.float16 else 1.5e-2)


def test_close_to_softmax_for_small_scores():
    """The order-2 Taylor kernel differs from ``exp`` by ``O(s³)``: shrinking the scores 4x shrinks the gap from
    softmax attention by more than 20x."""
    q, k, v = _qkv(nq=64, nk=64, seed=7)
    gaps = []
    for lim in (0.8, 0.2):
        ours = fastmax_attention(q, k, v, lim=lim)
        qn = lim * q / q.norm(dim=-1).amax(2, keepdim=True)[..., None]
        kn = lim * k / k.norm(dim=-1).amax(2, keepdim=True)[..., None]
        soft = torch.nn.functional.scaled_dot_product_attention(qn, kn, v, scale=1.0)
        gaps.append(_rel(ours, soft))
    assert gaps[0] > 20 * gaps[1]


@pytest.mark.parametrize("kw,words", [(dict(order=3), "order"), (dict(coefficients=(1.0, 1.0)), "coefficients"),
                                      (dict(normalize="l2"), "normalize"), (dict(lim=0.0), "lim"),
                                      (dict(temperature=-1.0), "temperature"), (dict(causal=1), "causal"),
                                      (dict(chunk=0), "chunk")])
def test_bad_options_are_named(kw, words):
    q, k, v = _qkv(nq=4, nk=4)
    with pytest.raises((ValueError, TypeError), match=words):
        fastmax_attention(q, k, v, **kw)


def test_bad_inputs_are_named():
    q, k, v = _qkv(nq=4, nk=5)
    with pytest.raises(ValueError, match="causal"):
        fastmax_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="weights"):
        fastmax_attention(q, k, v, -torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="v: expected"):
        fastmax_attention(q, k, v[:, :, :3])
