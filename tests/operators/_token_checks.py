"""Shared checks for the quadrature-weighted token operators (Transolver, LinearNO, ONO): the maths primitives the
transcriptions are written in, and the weights / padding / permutation / gradient / bad-input properties."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn.operators import create_operator


# ----------------------------------------------------------------------------- primitives for the transcriptions
def lin(p, name, x, bias=True):
    y = x @ p[f"{name}.weight"].T
    return y + p[f"{name}.bias"] if bias else y


def ln(p, name, x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def softmax(x, dim):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def params(model):
    return {k: v.detach() for k, v in model.named_parameters()}


def grid_nodes(n: int, m: int) -> torch.Tensor:
    """Nodes ``(i/n, j/m)`` of the uniform rule in C order, ``(n·m, 2)``."""
    i, j = torch.meshgrid(torch.arange(n, dtype=torch.float64) / n, torch.arange(m, dtype=torch.float64) / m,
                          indexing="ij")
    return torch.stack([i.reshape(-1), j.reshape(-1)], -1)


# ----------------------------------------------------------------------------- properties
def build(name, cfg, seed=0):
    torch.manual_seed(seed)
    model = create_operator(name, **cfg).double()
    # the published init (trunc_normal 0.02) makes every layer nearly constant; widen it so the checks see the maths
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.5 / p.shape[1] ** 0.5)
            elif p.dim() == 1:
                p.normal_(0, 0.1)
    return model


def cloud(b=2, n=40, c=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, c, generator=g, dtype=torch.float64)
    pos = torch.rand(b, n, 2, generator=g, dtype=torch.float64)
    w = torch.exp(2 * torch.randn(b, n, generator=g, dtype=torch.float64))  # strongly non-uniform
    return x, pos, w


def check_duplicate_half_weights(model):
    """Splitting a point into two copies with half its weight each is the same quadrature: outputs unchanged."""
    x, pos, w = cloud()
    ref = model(x, pos, w)
    j = 7
    x2 = torch.cat([x, x[:, j:j + 1]], 1)
    pos2 = torch.cat([pos, pos[:, j:j + 1]], 1)
    w2 = torch.cat([w, w[:, j:j + 1] / 2], 1)
    w2[:, j] /= 2
    out = model(x2, pos2, w2)
    torch.testing.assert_close(out[:, :40], ref, atol=1e-11, rtol=0)
    torch.testing.assert_close(out[:, 40], ref[:, j], atol=1e-11, rtol=0)
    # and doubling that point's weight instead (a different quadrature) changes every output measurably
    w3 = w.clone()
    w3[:, j] *= 8
    assert (model(x, pos, w3) - ref).abs().max() > 5e-5  # round-off is ~1e-15
    # uniform weights (the published average) differ from the given non-uniform ones
    assert (model(x, pos) - ref).abs().max() > 5e-5  # round-off is ~1e-15
    # scaling every weight is the same normalised rule
    torch.testing.assert_close(model(x, pos, w * 3.7), ref, atol=1e-11, rtol=0)


def pad_cloud(x, pos, w, pad, far=1e6):
    """``x``, ``pos``, ``w`` ``(B, N, ·)`` with ``pad`` garbage points appended (NaN features and weights,
    positions ``far``) and the mask ``(B, N + pad)`` of the real points."""
    b, n, c = x.shape
    xp = torch.cat([x, torch.full((b, pad, c), float("nan"), dtype=torch.float64)], 1)
    posp = torch.cat([pos, torch.full((b, pad, pos.shape[-1]), far, dtype=torch.float64)], 1)
    wp = torch.cat([w, torch.full((b, pad), float("nan"), dtype=torch.float64)], 1)
    mask = torch.ones(b, n + pad, dtype=torch.bool)
    mask[:, n:] = False
    return xp, posp, wp, mask


def check_padding(model):
    x, pos, w = cloud()
    ref = model(x, pos, w)
    xp, posp, wp, mask = pad_cloud(x, pos, w, 9)
    out = model(xp, posp, wp, mask)
    torch.testing.assert_close(out[:, :40], ref, atol=1e-11, rtol=0)
    assert (out[:, 40:] == 0).all()
    # ragged padding: sample 1 has only 30 real points; equal to running it alone
    mask2 = mask.clone()
    mask2[1, 30:] = False
    out2 = model(xp, posp, wp, mask2)
    alone = model(x[1:, :30], pos[1:, :30], w[1:, :30])
    torch.testing.assert_close(out2[1:, :30], alone, atol=1e-11, rtol=0)
    torch.testing.assert_close(out2[:1, :40], ref[:1], atol=1e-11, rtol=0)


def check_permutation(model):
    x, pos, w = cloud()
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(3))
    ref = model(x, pos, w)
    out = model(x[:, perm], pos[:, perm], w[:, perm])
    torch.testing.assert_close(out, ref[:, perm], atol=1e-11, rtol=0)


def check_permutation_and_gradients(model, a, x, w):
    """Permuting the points of ``a``, ``x``, ``w`` permutes the output (``torch.randperm``: the global generator);
    the gradients of a loss of the output are finite at every parameter, and not all zero."""
    perm = torch.randperm(a.shape[1])
    out = model(a, pos=x, weights=w)
    assert float((model(a[:, perm], pos=x[:, perm], weights=w[:, perm]) - out[:, perm]).abs().max()) <= 1e-12
    out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


def check_gradients(model):
    x, pos, w = cloud()
    x.requires_grad_(True)
    model.zero_grad()
    out = model(x, pos, w)
    (out.square().mean() + model(torch.randn(1, 2, 8, 8, dtype=torch.float64)).mean()).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def check_bad_inputs(model, name, cfg):
    x, pos, w = cloud()
    with pytest.raises(ValueError, match=r"x: expected .*input channels"):
        model(torch.randn(1, 3, 8, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x: expected"):
        model(torch.randn(1, 2, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"pos: expected 2 coordinates per point, got 3"):
        model(x, torch.rand(2, 40, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"weights: expected non-negative finite values"):
        model(x, pos, -w)
    with pytest.raises(ValueError, match=r"weights: expected shape"):
        model(x, pos, w[:, :10])
    with pytest.raises(ValueError, match=r"x: expected finite values"):
        model(torch.full((1, 2, 8, 8), float("nan"), dtype=torch.float64))
    with pytest.raises(TypeError, match=r"x: expected dtype torch.float64"):
        model(torch.randn(1, 2, 8, 8))
    with pytest.raises(ValueError, match=r"pos: weights and mask are for point sets"):
        model(torch.randn(1, 2, 8, 8, dtype=torch.float64), weights=w)
    with pytest.raises(ValueError, match=r"x: .* needs at least 2 points along every spatial axis"):
        model(torch.randn(1, 2, 1, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"n_heads: expected a divisor of width=8, got 3"):
        create_operator(name, **{**cfg, "width": 8, "n_heads": 3})
    with pytest.raises(ValueError, match=r"spatial_dims: expected 1, 2 or 3, got 4"):
        create_operator(name, **{**cfg, "spatial_dims": 4})
    with pytest.raises(ValueError, match=r"width: expected a positive"):
        create_operator(name, **{**cfg, "width": 0})


def check_bad_argument(name, cfg, change, exc, words):
    """Building operator ``name`` from ``cfg`` updated by ``change`` raises ``exc`` whose message holds each of
    ``words`` (the argument, the expectation and the value given)."""
    with pytest.raises(exc) as info:
        create_operator(name, **{**cfg, **change})
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def check_grid_dims(name, cfg):
    """1-D and 3-D grids run and give the shape; the 1-D output converges under refinement of a smooth input."""
    for d, shape in ((1, (16,)), (3, (4, 5, 6))):
        m = build(name, {**cfg, "spatial_dims": d})
        out = m(torch.randn(2, cfg["in_channels"], *shape, dtype=torch.float64))
        assert out.shape == (2, cfg["out_channels"], *shape) and torch.isfinite(out).all()
    m = build(name, {**cfg, "spatial_dims": 1})

    @torch.no_grad()
    def run(n):
        t = torch.arange(n, dtype=torch.float64) / n
        return m(torch.stack([torch.sin(2 * math.pi * t), t ** 2])[None])

    ref = run(1024)
    errs = [float((run(n) - ref[..., :: 1024 // n]).abs().max()) for n in (64, 128, 256)]
    assert errs[0] > errs[1] > errs[2] and errs[2] < 0.6 * errs[0], errs


def grid_refinement_errors(model, dtype=torch.float64):
    """At initialisation, a smooth input (in ``dtype``) on 32², 64², 128² against 256² at the shared nodes: the
    maximum differences relative to the 256² output (no gradients)."""

    def field(n):
        t = torch.arange(n, dtype=dtype) / n
        xx, yy = torch.meshgrid(t, t, indexing="ij")
        return (torch.sin(2 * xx + 1) * torch.cos(3 * yy) + xx * yy)[None, None]

    with torch.no_grad():
        fine = model(field(256))
        return [float((model(field(n)) - fine[..., :: 256 // n, :: 256 // n]).abs().max() / fine.abs().max())
                for n in (32, 64, 128)]


def check_default_config_converges(name):
    """Operator ``name`` at its defaults (one input and one output channel, float64, eval mode, seed 0) converges at
    first order under grid refinement (:func:`grid_refinement_errors`): at most 5% at 128², and each halving of the
    cell width divides the difference by more than 1.6."""
    torch.manual_seed(0)
    model = create_operator(name, in_channels=1, out_channels=1).double().eval()
    errs = grid_refinement_errors(model)
    assert errs[2] <= 0.05 and errs[1] / errs[2] > 1.6 and errs[0] / errs[1] > 1.6, errs


def check_grid_is_the_point_set_of_its_nodes(model):
    """A grid input equals the point set of its nodes (C order) with equal weights, and with weights given as the
    cell volumes (any constant: the rule is normalised)."""
    a = torch.randn(2, 2, 6, 5, dtype=torch.float64)
    grid = model(a)
    tokens = a.flatten(2).transpose(1, 2)
    pos = grid_nodes(6, 5).expand(2, -1, -1)
    pts = model(tokens, pos)
    torch.testing.assert_close(pts, grid.flatten(2).transpose(1, 2), atol=1e-12, rtol=0)
    torch.testing.assert_close(model(tokens, pos, torch.full((2, 30), 1 / 30, dtype=torch.float64)), pts,
                               atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- the shared tests
def property_tests(name, cfg, skip=()):
    """The property tests every token operator runs (Transolver, LinearNO, ONO), as module-level test functions
    named as pytest collects them; a test module installs them with ``globals().update(property_tests(NAME, CFG))``.
    ``skip``: names the module defines itself."""

    def test_weights_enter_as_a_quadrature():
        check_duplicate_half_weights(build(name, cfg))

    def test_padding_is_ignored():
        check_padding(build(name, cfg))

    def test_permutation_equivariance():
        check_permutation(build(name, cfg))

    def test_gradients_are_finite_and_reach_the_input():
        check_gradients(build(name, cfg))

    def test_one_and_three_dimensional_grids():
        check_grid_dims(name, cfg)

    def test_grid_is_the_point_set_of_its_nodes():
        check_grid_is_the_point_set_of_its_nodes(build(name, cfg))

    tests = {t.__name__: t for t in (test_weights_enter_as_a_quadrature, test_padding_is_ignored,
                                     test_permutation_equivariance, test_gradients_are_finite_and_reach_the_input,
                                     test_one_and_three_dimensional_grids, test_grid_is_the_point_set_of_its_nodes)}
    unknown = set(skip) - set(tests)
    if unknown:
        raise ValueError(f"skip: not a shared test: {sorted(unknown)}")
    return {k: t for k, t in tests.items() if k not in skip}
