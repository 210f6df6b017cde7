"""FuncAttn (operators/funcattn.py) against a float64 transcription of the published forward
(``_funcattn_published.py``, xjffff/FUNCATTN's irregular-mesh model), and its quadrature, padding, permutation,
initialisation and input checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.funcattn  # noqa: F401  (registers "funcattn")
from sciattn.operators import create_operator
from sciattn.operators.funcattn import functional_map

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402
from _funcattn_published import published_funcattn  # noqa: E402

NAME = "funcattn"
CFG = dict(in_channels=2, out_channels=3, spatial_dims=2, width=8, n_layers=2, n_heads=2, basis_num=5, mlp_ratio=2)


def build(cfg=CFG, seed=0):
    """The widened random init of the token checks, with LayerNorm gains near 1 (so that the basis varies over the
    points), temperatures in [0.2, 1.5] (inside the clamp, where the published unclamped τ is the same) and ridge
    weights a = sigmoid(α) away from 1/2."""
    model = tc.build(NAME, cfg, seed)
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("temperature"):
                p.copy_(0.2 + 1.3 * torch.rand(p.shape, generator=g, dtype=p.dtype))
            elif ".ln" in name and name.endswith("weight"):
                p.add_(1.0)
            elif name.endswith("alpha"):
                p.fill_(float(torch.randn((), generator=g)) - 1.0)
    return model


def rel(out, ref):
    return float((out - ref).detach().abs().max() / ref.detach().abs().max())


@pytest.mark.parametrize("shared", [True, False])
def test_grid_equals_the_published_plain_sums(shared):
    """On a grid the cell volumes are equal: with basis_eps = 1e-5 / N ours is the published
    Σ_i φ_ig f_i / (Σ_i φ_ig + 1e-5) and its explicit dual-form map, to round-off (≤ 1e-10 relative)."""
    n1, n2 = 6, 5
    cfg = {**CFG, "shared_basis": shared, "basis_eps": 1e-5 / (n1 * n2)}
    model = build(cfg)
    a = torch.randn(2, 2, n1, n2, dtype=torch.float64)
    out = model(a).flatten(2).transpose(1, 2)
    ref = published_funcattn(tc.params(model), a.flatten(2).transpose(1, 2), tc.grid_nodes(n1, n2).expand(2, -1, -1),
                             None, cfg, shared=shared)
    assert rel(out, ref) <= 1e-10
    assert ref.abs().mean() > 0.05  # not a trivial comparison


def test_point_set_without_weights_is_the_published_form():
    """On a point set, ``weights=None`` (equal weights) is the published plain-sum projection."""
    x, pos, _ = tc.cloud()
    cfg = {**CFG, "basis_eps": 1e-5 / x.shape[1]}
    model = build(cfg)
    assert rel(model(x, pos), published_funcattn(tc.params(model), x, pos, None, cfg)) <= 1e-10


@pytest.mark.parametrize("shared", [True, False])
def test_points_equal_the_weighted_transcription(shared):
    cfg = {**CFG, "shared_basis": shared}
    model = build(cfg)
    x, pos, w = tc.cloud()
    ref = published_funcattn(tc.params(model), x, pos, w / w.sum(1, keepdim=True), cfg, shared=shared)
    assert rel(model(x, pos, w), ref) <= 1e-10
    # and the non-uniform weights matter: the published plain sums are another operator on this cloud
    assert rel(model(x, pos), ref) > 1e-3


def test_functional_map_is_the_ridge_solution_in_both_forms():
    """``C V`` as computed (``Q (M^{-1} KᵀV)``) equals the dual form ``(Q M^{-1} Kᵀ) V`` of the PDE code, the
    primal form ``Q Kᵀ((1-a) K Kᵀ + a I_G)^{-1} V`` of the RNA code, and ``(1-a) C`` is the ridge solution
    ``argmin_C ‖C K - Q‖² + λ‖C‖²``, ``λ = a / (1-a)`` (its normal equations hold)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    a = torch.tensor(0.3, dtype=torch.float64)
    ours = functional_map(q, k, v, a)
    kt = k.transpose(-1, -2)
    dual = q @ torch.linalg.solve((1 - a) * kt @ k + a * torch.eye(4, dtype=torch.float64), kt)
    primal = q @ kt @ torch.linalg.inv((1 - a) * k @ kt + a * torch.eye(7, dtype=torch.float64))
    torch.testing.assert_close(ours, dual @ v, atol=1e-12, rtol=0)
    torch.testing.assert_close(ours, primal @ v, atol=1e-12, rtol=0)
    ridge, lam = (1 - a) * dual, a / (1 - a)
    torch.testing.assert_close((ridge @ k - q) @ kt + lam * ridge, torch.zeros_like(dual), atol=1e-12, rtol=0)
    assert float(((dual @ k - q) @ kt + lam * dual).abs().max()) > 0.1  # C itself is 1/(1-a) times it
    assert float((ours - q).abs().max()) > 0.1  # not the identity


def test_solve_runs_in_float32_under_autocast():
    model = create_operator(NAME, in_channels=2, out_channels=1, width=16, n_layers=1, n_heads=2, basis_num=4)
    a = torch.randn(1, 2, 8, 8)
    ref = model(a)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(a)
        mapped = functional_map(*(torch.randn(1, 4, 8, dtype=torch.bfloat16) for _ in range(3)),
                                torch.tensor(0.5))
    assert mapped.dtype == torch.float32
    assert torch.isfinite(out).all() and rel(out.float(), ref) < 0.1


def test_temperature_is_clamped_unlike_the_irregular_mesh_code():
    """Outside [0.1, 5] the clamp (ours, the structured-mesh code's) and the irregular-mesh code differ."""
    model = build()
    with torch.no_grad():
        model.basis.temperature.fill_(0.03)
    x, pos, w = tc.cloud()
    w = w / w.sum(1, keepdim=True)
    ref = published_funcattn(tc.params(model), x, pos, w, CFG)
    assert rel(model(x, pos, w), ref) > 1e-3
    with torch.no_grad():
        model.basis.temperature.fill_(0.1)
    assert rel(model(x, pos, w), published_funcattn(tc.params(model), x, pos, w, CFG)) <= 1e-10  # the boundary


def test_initialisation_as_published():
    """Blocks: Linear trunc_normal(0.02), zero bias; the shared basis projections are made after that pass (PyTorch's
    default init, an orthogonal W_b); per-block ones are overwritten by the trunc_normal pass; α = 1e-3."""
    torch.manual_seed(0)
    model = create_operator(NAME, in_channels=2, out_channels=1, width=64, n_heads=4, basis_num=8)
    assert abs(float(model.blocks[0].attn.out.weight.detach().std()) - 0.02) < 2e-3
    assert float(model.blocks[0].attn.out.bias.detach().abs().max()) == 0
    assert float(model.basis.in_x.weight.detach().std()) > 0.05  # kaiming-uniform, bound 1/8: std ≈ 0.072
    wb = model.basis.basis.weight                          # (G, d) = (8, 16): orthonormal rows
    torch.testing.assert_close(wb @ wb.T, torch.eye(8), atol=1e-5, rtol=0)
    assert all(float(b.attn.alpha.detach()) == pytest.approx(1e-3) for b in model.blocks)
    per_block = create_operator(NAME, in_channels=2, out_channels=1, width=64, n_heads=4, basis_num=8,
                                shared_basis=False)
    assert abs(float(per_block.blocks[1].attn.own_basis.in_x.weight.detach().std()) - 0.02) < 2e-3
    assert not hasattr(per_block, "basis") or not isinstance(getattr(per_block, "basis", None), torch.nn.Module)


def test_shared_basis_is_one_set_of_parameters():
    shared = create_operator(NAME, in_channels=2, out_channels=1, n_layers=3)
    per_block = create_operator(NAME, in_channels=2, out_channels=1, n_layers=3, shared_basis=False)
    basis = sum(p.numel() for p in shared.basis.parameters())
    count = sum(p.numel() for p in shared.parameters())
    assert sum(p.numel() for p in per_block.parameters()) == count + 2 * basis
    assert all(b.attn.basis is shared.basis for b in shared.blocks)
    assert not any(".attn.basis" in k or "own_basis" in k for k in shared.state_dict())


# test_padding_is_ignored, test_permutation_equivariance,
# test_gradients_are_finite_and_reach_the_input, test_one_and_three_dimensional_grids,
# test_grid_is_the_point_set_of_its_nodes
globals().update(tc.property_tests(NAME, CFG, skip=("test_weights_enter_as_a_quadrature",)))


def test_weights_enter_as_a_quadrature():
    """As the shared check, on this file's init: the shared one's LayerNorm gains near 0.1 leave the basis nearly
    constant over the points, and the weights' effect under its 5e-5 threshold."""
    tc.check_duplicate_half_weights(build())


def test_bad_inputs_name_the_argument():
    tc.check_bad_inputs(build(), NAME, CFG)
    with pytest.raises(ValueError, match=r"basis_eps: expected a non-negative number, got -1"):
        create_operator(NAME, **{**CFG, "basis_eps": -1})
    with pytest.raises(ValueError, match=r"basis_num: expected a positive"):
        create_operator(NAME, **{**CFG, "basis_num": 0})
    with pytest.raises(ValueError, match=r"alpha_init: expected a finite number .*, got nan"):
        create_operator(NAME, **{**CFG, "alpha_init": float("nan")})
    with pytest.raises(ValueError, match=r"shared_basis: expected True or False, got 1"):
        create_operator(NAME, **{**CFG, "shared_basis": 1})


@torch.no_grad()
def test_default_eps_against_the_published_scale_on_a_grid():
    """``basis_eps = 1e-5`` on a unit mass against the published ``1e-5`` on a mass of ``N`` (``1e-5 / N`` here), at
    the defaults on a 64² grid: a small difference, not zero (the docs quote it)."""
    torch.manual_seed(0)
    ours = create_operator(NAME, in_channels=1, out_channels=1).double().eval()
    published = create_operator(NAME, in_channels=1, out_channels=1, basis_eps=1e-5 / 64 ** 2).double().eval()
    published.load_state_dict(ours.state_dict())
    a = torch.randn(2, 1, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    diff = rel(ours(a), published(a))
    print(f"relative difference {diff:.2e}")
    assert 1e-6 < diff < 1e-3
