"""ONO (operators/ono.py) against a from-scratch transcription of its equations (Xiao et al. 2024, xzppp/ONO as
described in the reference notes, with the projection as a quadrature), the published bare-sum projection's
growth with N, and its quadrature, padding, permutation and input checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.ono  # noqa: F401  (registers "ono")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

NAME = "ono"
CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, psi_dim=4, mlp_ratio=2,
           variant="sciattn_v1")  # the transcription below is of the earlier layout (published: test_published_forwards.py)


def _mlp(p, name, x):
    return tc.lin(p, f"{name}.2", tc.gelu(tc.lin(p, f"{name}.0", x)))


def reference_ono(p, a, x, w, cfg, jitter=1e-4, bare_sum=False, terms=None):
    """ONO, one sample at a time (the published code pools Σ over the batch; with B = 1 that is the same):
    x <- x + LinAttn(LN1 x), x <- x + MLP(LN2 x), ψ = Proj(x), Σ = Σ_i w_i ψ_i ψ_iᵀ + jitter tr(Σ)/k I,
    ψ^ = ψ L^{-T} (L Lᵀ = Σ), f <- (ψ^ ⊙ softplus μ)(Σ_j w_j ψ^_j f_jᵀ) + f, f <- MLP2(LN3 f).
    LinAttn per head: q~ = softmax_d(q)/√d, k~_j = w_j e^{k_j}/Σ_l w_l e^{k_l}, out = q~ (k~ᵀ v).
    ``bare_sum``: the published projection Σ_j ψ^_j f_jᵀ (no weights)."""
    heads, c = cfg["n_heads"], cfg["width"]
    d = c // heads
    outs = []
    for s in range(a.shape[0]):
        ws = w[s]
        xs, f = _mlp(p, "lift", torch.cat([x[s], a[s]], -1)).split(c, -1)
        for layer in range(cfg["n_layers"]):
            b = f"blocks.{layer}"
            u = tc.ln(p, f"{b}.ln1", xs)
            q, k, v = (tc.lin(p, f"{b}.attn.{t}", u, bias=False) for t in "qkv")
            att = []
            for hd in range(heads):
                sl = slice(hd * d, (hd + 1) * d)
                qt = tc.softmax(q[:, sl], -1) / d ** 0.5
                e = ws[:, None] * torch.exp(k[:, sl])
                kt = e / e.sum(0, keepdim=True)
                att.append(qt @ (kt.T @ v[:, sl]))
            xs = xs + tc.lin(p, f"{b}.attn.out", torch.cat(att, -1))
            xs = xs + _mlp(p, f"{b}.mlp", tc.ln(p, f"{b}.ln2", xs))
            psi = _mlp(p, f"{b}.proj", xs)
            kdim = psi.shape[-1]
            cov = (ws[:, None, None] * psi[:, :, None] * psi[:, None, :]).sum(0)
            cov = cov + jitter * torch.trace(cov) / kdim * torch.eye(kdim, dtype=cov.dtype)
            chol = torch.linalg.cholesky(cov)
            psi = psi @ torch.linalg.inv(chol).T
            coeff = psi.T @ f if bare_sum else (ws[:, None] * psi).T @ f
            term = (psi * torch.log1p(torch.exp(p[f"{b}.mu"]))) @ coeff
            if terms is not None:
                terms.append(term)
            f = term + f
            if layer == cfg["n_layers"] - 1:
                f = tc.lin(p, f"{b}.mlp2", tc.ln(p, f"{b}.ln3", f))
            else:
                f = _mlp(p, f"{b}.mlp2", tc.ln(p, f"{b}.ln3", f))
        outs.append(f)
    return torch.stack(outs)


def test_grid_equals_the_transcription_with_cell_volumes():
    model = tc.build(NAME, CFG)
    a = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    ref = reference_ono(tc.params(model), a.flatten(2).transpose(1, 2), tc.grid_nodes(6, 5).expand(2, -1, -1),
                        torch.full((2, 30), 1 / 30, dtype=torch.float64), CFG)
    assert (model(a).flatten(2).transpose(1, 2) - ref).abs().max() <= 1e-10
    model.eval()  # no running covariance: eval() computes the same function
    assert (model(a).flatten(2).transpose(1, 2) - ref).abs().max() <= 1e-10


def test_points_equal_the_weighted_transcription():
    model = tc.build(NAME, CFG)
    x, pos, w = tc.cloud()
    ref = reference_ono(tc.params(model), x, pos, w / w.sum(1, keepdim=True), CFG)
    assert (model(x, pos, w) - ref).abs().max() <= 1e-10
    assert ref.abs().mean() > 0.05


def test_features_are_orthonormal_in_the_weighted_inner_product():
    from sciattn.operators.ono import orthonormalize

    g = torch.Generator().manual_seed(5)
    psi = torch.randn(2, 50, 4, generator=g, dtype=torch.float64)
    w = torch.rand(2, 50, generator=g, dtype=torch.float64)
    w = w / w.sum(1, keepdim=True)
    out = orthonormalize(psi, w, 0.0)
    gram = torch.einsum("bn,bnc,bnd->bcd", w, out, out)
    torch.testing.assert_close(gram, torch.eye(4, dtype=torch.float64).expand(2, 4, 4), atol=1e-12, rtol=0)


def test_published_bare_sum_grows_with_the_point_count():
    """The measured effect behind the docstring: the same smooth field on 16² and 32² grids. The published projection
    Σ_j ψ^_j f_jᵀ makes the integral term 4× larger on the finer grid (the ratio of point counts) against the skip;
    the quadrature one keeps it. LN3 hides the overall scale, not the balance: the output at the shared nodes
    moves more with the bare sum."""
    cfg = {**CFG, "n_layers": 1}
    p = tc.params(tc.build(NAME, cfg))
    term_ratio, shift = {}, {}
    for bare in (True, False):
        outs, terms = [], []
        for n in (16, 32):
            nodes = tc.grid_nodes(n, n)[None]
            a = torch.stack([torch.sin(3 * nodes[..., 0]), nodes[..., 1] ** 2], -1)
            w = torch.full((1, n * n), 1 / (n * n), dtype=torch.float64)
            t = []
            outs.append(reference_ono(p, a, nodes, w, cfg, bare_sum=bare, terms=t))
            terms.append(t[0].reshape(n, n, -1)[:: n // 16, :: n // 16])
        term_ratio[bare] = float(terms[1].norm() / terms[0].norm())
        fine = outs[1].reshape(1, 32, 32, -1)[:, ::2, ::2].reshape(1, 256, -1)
        shift[bare] = float((fine - outs[0]).abs().max() / outs[0].abs().max())
    print(f"\nONO integral-term ratio 32²/16²: bare sum {term_ratio[True]:.3f}, quadrature {term_ratio[False]:.3f}; "
          f"output shift at shared nodes: bare sum {shift[True]:.4f}, quadrature {shift[False]:.4f}")
    assert abs(term_ratio[True] - 4) < 0.2 and abs(term_ratio[False] - 1) < 0.05, term_ratio
    assert shift[True] > 1.5 * shift[False], shift


# test_weights_enter_as_a_quadrature, test_padding_is_ignored, test_permutation_equivariance,
# test_gradients_are_finite_and_reach_the_input, test_one_and_three_dimensional_grids,
# test_grid_is_the_point_set_of_its_nodes
globals().update(tc.property_tests(NAME, CFG))


def test_bad_inputs_name_the_argument():
    tc.check_bad_inputs(tc.build(NAME, CFG), NAME, CFG)
    with pytest.raises(ValueError, match=r"cov_jitter: expected a non-negative number, got -0.1"):
        create_operator(NAME, **{**CFG, "cov_jitter": -0.1})
    with pytest.raises(ValueError, match=r"psi_dim: expected a positive"):
        create_operator(NAME, **{**CFG, "psi_dim": 0})
