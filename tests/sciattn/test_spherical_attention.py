"""Spherical attention (global and geodesic-disc) against dense float64 formulas written here, analytic
integrals on the sphere, rotation equivariance, and (when importable) torch-harmonics."""

from __future__ import annotations

import math

import pytest
import torch

from sciattn import BackendError
from sciattn._dispatch import backends_for
from sciattn.quadrature import SPHERE_GRIDS, sphere_quadrature
from sciattn.spherical import (
    SphereResample,
    SphericalAttention,
    SphericalNeighborhoodAttention,
    spherical_attention,
    spherical_neighborhood_attention,
)

F64 = torch.float64
RESAMPLINGS = [((6, 12), (6, 12)), ((9, 16), (5, 8)), ((5, 8), (9, 16))]  # self, 2× down, 2× up in longitude


def _positions(nlat, nlon, grid):
    theta = sphere_quadrature(nlat, grid)[0]
    lam = torch.tensor([2 * math.pi * j / nlon for j in range(nlon)], dtype=F64)
    t, l_ = torch.meshgrid(theta, lam, indexing="ij")
    return torch.stack([t.sin() * l_.cos(), t.sin() * l_.sin(), t.cos()], 0)  # (3, nlat, nlon)


def _point_weights(nlat, nlon, grid):
    """Area weight of every flat point j = i·nlon + l, written out point by point."""
    w_lat = sphere_quadrature(nlat, grid)[1]
    return torch.tensor([2 * math.pi * float(w_lat[i]) / nlon for i in range(nlat) for _ in range(nlon)], dtype=F64)


def _dense(q, k, v, grid, n_heads, theta=None, grid_out=None):
    """Σ_j q_j e^{s_ij} v_j / Σ_j q_j e^{s_ij} over all keys, or keys with arccos(x_i·x_j) ≤ 1.001 θ."""
    b, c, nlat_o, nlon_o = q.shape
    nlat, nlon = k.shape[2:]
    d = c // n_heads
    qt = q.reshape(b, n_heads, d, -1).transpose(-1, -2)
    kt = k.reshape(b, n_heads, d, -1).transpose(-1, -2)
    vt = v.reshape(b, n_heads, v.shape[1] // n_heads, -1).transpose(-1, -2)
    s = qt @ kt.transpose(-1, -2) / math.sqrt(d) + torch.log(_point_weights(nlat, nlon, grid))
    if theta is not None:
        xo = _positions(nlat_o, nlon_o, grid_out or grid).reshape(3, -1)
        xi = _positions(nlat, nlon, grid).reshape(3, -1)
        s = s.masked_fill(torch.arccos((xo.T @ xi).clamp(-1, 1)) > 1.001 * theta, -math.inf)
    out = torch.softmax(s, -1) @ vt
    return out.transpose(-1, -2).reshape(b, -1, nlat_o, nlon_o)


def _fields(shape_in, shape_out, c=4, e=6, b=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, c, *shape_out, dtype=F64, generator=g), torch.randn(b, c, *shape_in, dtype=F64, generator=g),
            torch.randn(b, e, *shape_in, dtype=F64, generator=g))


@pytest.mark.parametrize("backend", [b.name for b in backends_for("weighted_softmax")])
@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("shape_in,shape_out", RESAMPLINGS)
def test_global_matches_dense_formula(backend, grid, shape_in, shape_out):
    q, k, v = _fields(shape_in, shape_out)
    try:
        got = spherical_attention(q, k, v, grid_in=grid, n_heads=2, backend=backend)
    except BackendError as err:
        pytest.skip(str(err))
    torch.testing.assert_close(got, _dense(q, k, v, grid, 2), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("shape_in,shape_out", RESAMPLINGS)
@pytest.mark.parametrize("theta", [None, 0.6, 1.1])
def test_neighborhood_matches_dense_masked_formula(grid, shape_in, shape_out, theta):
    q, k, v = _fields(shape_in, shape_out)
    got = spherical_neighborhood_attention(q, k, v, grid_in=grid, n_heads=2, theta_cutoff=theta)
    radius = theta if theta is not None else max(
        float(sphere_quadrature(n, grid)[0].diff().max()) for n in (shape_in[0], shape_out[0]))
    torch.testing.assert_close(got, _dense(q, k, v, grid, 2, radius), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", [b.name for b in backends_for("neighborhood")])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_neighborhood_backends_match_dense_formula(backend, dtype):
    q, k, v = _fields((9, 16), (5, 8))
    try:
        got = spherical_neighborhood_attention(q.to(dtype), k.to(dtype), v.to(dtype), grid_in="legendre-gauss",
                                               n_heads=2, theta_cutoff=0.8, backend=backend)
    except BackendError as err:
        pytest.skip(str(err))
    tol = 1e-10 if dtype == F64 else 2e-5
    torch.testing.assert_close(got.double(), _dense(q, k, v, "legendre-gauss", 2, 0.8), rtol=tol, atol=tol)


@pytest.mark.parametrize("grid,shape_in,shape_out", [(g, *r) for g, r in zip(SPHERE_GRIDS, RESAMPLINGS)])
def test_neighborhood_layer_with_cutoff_pi_equals_global_layer(grid, shape_in, shape_out):
    g = SphericalAttention(8, 2, shape_in, shape_out, grid_in=grid, k_channels=6, out_channels=4).double()
    n = SphericalNeighborhoodAttention(8, 2, shape_in, shape_out, grid_in=grid, theta_cutoff=math.pi, k_channels=6,
                                       out_channels=4).double()
    n.load_state_dict(g.state_dict())
    q, x, _ = _fields(shape_in, shape_out, c=8)
    torch.testing.assert_close(n(q, x), g(q, x), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("layer", ["global", "neighborhood"])
@pytest.mark.parametrize("shape_in,shape_out", [((6, 12), (6, 12)), ((7, 16), (4, 8)), ((4, 8), (7, 16)),
                                                ((5, 12), (5, 4))])
def test_rolling_by_the_shared_longitude_spacing_rolls_the_output(layer, shape_in, shape_out):
    """With g = gcd(nlon_in, nlon_out), rolling the input by m·nlon_in/g columns and the query by
    m·nlon_out/g (for nlon_in = 2 nlon_out: two input columns, one output column) rolls the output."""
    cls = SphericalAttention if layer == "global" else SphericalNeighborhoodAttention
    kw = {} if layer == "global" else {"theta_cutoff": 0.9}
    model = cls(4, 2, shape_in, shape_out, grid_in="legendre-gauss", **kw).double()
    q, x, _ = _fields(shape_in, shape_out)
    g = math.gcd(shape_in[1], shape_out[1])
    out = model(q, x)
    for m in (1, 3):
        si, so = m * shape_in[1] // g, m * shape_out[1] // g
        rolled = model(q.roll(so, -1), x.roll(si, -1))
        torch.testing.assert_close(rolled, out.roll(so, -1), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(model(q, x.roll(1, -1)), out.roll(1, -1)) or shape_in[1] // g == 1


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("shape_in,shape_out", [((6, 12), (6, 12)), ((9, 16), (3, 8)), ((5, 8), (9, 16))])
def test_constant_logits_integrate_the_area_mean(grid, shape_in, shape_out):
    """With q = 0 every weight is the area weight: y = (1/4π)∫ v dA, and for v = 1 + z² + xy that is 4/3,
    exactly for these quadratures (the per-point weights must follow the latitude rows)."""
    x = _positions(*shape_in, grid)
    v = (1 + x[2] ** 2 + x[0] * x[1])[None, None].expand(2, 1, *shape_in)
    q, k = torch.zeros(2, 2, *shape_out, dtype=F64), torch.randn(2, 2, *shape_in, dtype=F64)
    out = spherical_attention(q, k, v, grid_in=grid)
    torch.testing.assert_close(out, torch.full_like(out, 4 / 3), rtol=1e-12, atol=1e-12)
    out = spherical_neighborhood_attention(q, k, torch.full_like(v, 2.5), grid_in=grid, theta_cutoff=0.6)
    torch.testing.assert_close(out, torch.full_like(out, 2.5), rtol=1e-12, atol=1e-12)  # a convex combination


def _cap_mean(beta, alpha):
    """E[t] for t = u·x, x uniform on the cap {u·x ≥ cos α} weighted by e^{βt}: t has density ∝ e^{βt} on [cos α, 1]."""
    c = math.cos(alpha)
    z = (math.exp(beta) - math.exp(beta * c)) / beta
    m = math.exp(beta) * (1 / beta - 1 / beta**2) - math.exp(beta * c) * (c / beta - 1 / beta**2)
    return m / z


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
def test_refining_the_key_grid_converges_to_the_analytic_integral(grid):
    """q(x') = β x', k(x) = x, v(x) = z: y(x') = z' · L(β) with L(β) = coth β − 1/β globally, and z' · E[t]
    on a cap of radius α. The query grid is fixed at 5×8; the key grid is refined."""
    beta, alpha = 2.0, 0.9
    xo = _positions(5, 8, grid)[None]
    exact_global = xo[:, 2:] * (1 / math.tanh(beta) - 1 / beta)
    exact_cap = xo[:, 2:] * _cap_mean(beta, alpha)
    err_g, err_n = [], []
    for nlat in (8, 16, 32, 64):
        xi = _positions(nlat, 2 * nlat, grid)[None]
        out = spherical_attention(beta * xo, xi, xi[:, 2:], grid_in=grid, scale=1.0)
        err_g.append((out - exact_global).abs().max().item())
        out = spherical_neighborhood_attention(beta * xo, xi, xi[:, 2:], grid_in=grid, theta_cutoff=alpha, scale=1.0)
        err_n.append((out - exact_cap).abs().max().item())
    assert err_g[0] < 1e-5 and max(err_g[1:]) < 1e-12  # smooth integrand: spectral convergence
    assert err_n[-1] < 1e-2 and err_n[-1] < err_n[0] / 3  # the cap's discretised edge: first order


def test_gradients_match_finite_differences():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 2, 4, dtype=F64, generator=g, requires_grad=True)
    k = torch.randn(1, 4, 4, 8, dtype=F64, generator=g, requires_grad=True)
    v = torch.randn(1, 2, 4, 8, dtype=F64, generator=g, requires_grad=True)
    check = dict(fast_mode=True)
    assert torch.autograd.gradcheck(lambda a, b, c: spherical_attention(a, b, c, grid_in="lobatto", n_heads=2),
                                    (q, k, v), **check)
    assert torch.autograd.gradcheck(
        lambda a, b, c: spherical_neighborhood_attention(a, b, c, grid_in="lobatto", n_heads=2, theta_cutoff=1.0),
        (q, k, v), **check)
    layer = SphericalNeighborhoodAttention(4, 2, (4, 8), (2, 4), grid_in="legendre-gauss").double()
    assert torch.autograd.gradcheck(lambda a, b: layer(a, b), (q, k), **check)


def test_sphere_resample_is_exact_on_nested_grids_and_converges():
    x = torch.randn(2, 3, 9, 16, dtype=F64)
    torch.testing.assert_close(SphereResample((9, 16), (5, 8)).double()(x), x[:, :, ::2, ::2], rtol=0, atol=1e-12)
    assert SphereResample((9, 16), (9, 16))(x) is x
    errs = []
    for n in (8, 16, 32):
        src = _positions(n, 2 * n, "legendre-gauss")
        dst = _positions(7, 12, "equiangular")
        f = lambda p: torch.exp(p[0]) * p[2] + p[1] ** 2  # noqa: E731
        out = SphereResample((n, 2 * n), (7, 12), "legendre-gauss", "equiangular").double()(f(src)[None, None])
        errs.append((out[0, 0] - f(dst)).abs().max().item())
    assert errs[2] < errs[1] < errs[0] and errs[2] < 1e-2


def test_errors_name_the_argument_expected_and_given():
    with pytest.raises(ValueError, match=r"nlon_in/nlon_out: expected one of nlon_in, nlon_out to be an integer "
                                         r"multiple of the other .*got nlon_in=12, nlon_out=8"):
        SphericalNeighborhoodAttention(4, 1, (6, 12), (4, 8))
    with pytest.raises(ValueError, match=r"nlon_in/nlon_out: .*got nlon_in=12, nlon_out=8"):
        spherical_attention(torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 6, 12), torch.zeros(1, 2, 6, 12))
    with pytest.raises(ValueError, match=r"grid_in: expected one of \['equiangular', 'legendre-gauss', 'lobatto'\], "
                                         r"got 'gauss'"):
        SphericalAttention(4, 1, (6, 12), grid_in="gauss")
    with pytest.raises(ValueError, match=r"grid_out: expected one of .*got 'healpix'"):
        spherical_neighborhood_attention(*(torch.zeros(1, 2, 6, 12),) * 3, grid_out="healpix")
    layer = SphericalNeighborhoodAttention(4, 2, (6, 12), (3, 6))
    with pytest.raises(ValueError, match=r"key: expected shape \(B, 4, 6, 12\) on the input grid, got \(1, 4, 6, 10\)"):
        layer(torch.zeros(1, 4, 3, 6), torch.zeros(1, 4, 6, 10))
    with pytest.raises(ValueError, match=r"query: expected shape \(B, 4, 3, 6\) on the output grid, got \(1, 4, 6, 12\)"):
        layer(torch.zeros(1, 4, 6, 12), torch.zeros(1, 4, 6, 12))
    with pytest.raises(ValueError, match=r"key: expected a field of shape \(B, 4, 6, 12\) on the input grid"):
        layer(torch.zeros(1, 4, 3, 6))
    with pytest.raises(ValueError, match=r"in_shape: expected \(nlat, nlon\), two positive ints, got \(6, 0\)"):
        SphericalAttention(4, 1, (6, 0))
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=rf"theta_cutoff: expected a finite positive float \(radians\) or None, "
                                             rf"got {bad}"):
            SphericalNeighborhoodAttention(4, 1, (6, 12), theta_cutoff=bad)
    with pytest.raises(ValueError, match=r"theta_cutoff: expected a radius that reaches an input point from every "
                                         r"output point, got 0.3, which leaves \d+ of 144 output points with an empty"):
        SphericalNeighborhoodAttention(4, 1, (5, 8), (9, 16), theta_cutoff=0.3)
    with pytest.raises(ValueError, match=r"n_heads: expected a divisor of k_channels=4, got 3"):
        SphericalAttention(4, 3, (6, 12))


# ------------------------------------------------------------------ torch-harmonics (optional oracle)

def _load_into_torch_harmonics(ours, theirs):
    with torch.no_grad():
        for mine, name in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "proj")):
            lin = getattr(ours, mine)
            lin.bias.normal_()
            getattr(theirs, f"{name}_weights").copy_(lin.weight[:, :, None, None])
            getattr(theirs, f"{name}_bias").copy_(lin.bias)


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("shape_in,shape_out", RESAMPLINGS + [((7, 12), (7, 6))])
@pytest.mark.parametrize("theta", [None, 0.6])
def test_neighborhood_layer_matches_torch_harmonics(grid, shape_in, shape_out, theta):
    th = pytest.importorskip("torch_harmonics")
    theirs = th.NeighborhoodAttentionS2(8, shape_in, shape_out, grid_in=grid, grid_out=grid, num_heads=2,
                                        theta_cutoff=theta, k_channels=4, out_channels=6, optimized_kernel=False)
    ours = SphericalNeighborhoodAttention(8, 2, shape_in, shape_out, grid_in=grid, theta_cutoff=theta, k_channels=4,
                                          out_channels=6)
    _load_into_torch_harmonics(ours, theirs)
    assert ours.theta_cutoff == pytest.approx(theirs.theta_cutoff, rel=1e-12)
    q, x = torch.randn(2, 8, *shape_out), torch.randn(2, 8, *shape_in)
    torch.testing.assert_close(ours(q, x), theirs(q, x, x), rtol=0, atol=1e-5)
    # Same index sets: their psi stores output longitude 0 and shifts it (gather direction only).
    if shape_in[1] % shape_out[1] == 0:
        pscale, nlon_in = shape_in[1] // shape_out[1], shape_in[1]
        for ho in range(shape_out[0]):
            psi = theirs.psi_col_idx[theirs.psi_roff_idx[ho] : theirs.psi_roff_idx[ho + 1]]
            for wo in (0, shape_out[1] - 1):
                row = ours.row_offsets[ho * shape_out[1] + wo : ho * shape_out[1] + wo + 2]
                mine = ours.col_indices[row[0] : row[1]]
                shifted = (psi // nlon_in) * nlon_in + (psi % nlon_in + pscale * wo) % nlon_in
                assert torch.equal(mine.sort().values, shifted.sort().values)


@pytest.mark.parametrize("grid", SPHERE_GRIDS)
@pytest.mark.parametrize("shape_in,shape_out", [((6, 12), (6, 12)), ((9, 16), (5, 8)), ((7, 12), (7, 6))])
def test_global_layer_matches_torch_harmonics(grid, shape_in, shape_out):
    th = pytest.importorskip("torch_harmonics")
    theirs = th.AttentionS2(8, 2, shape_in, shape_out, grid_in=grid, grid_out=grid, k_channels=4, out_channels=6)
    ours = SphericalAttention(8, 2, shape_in, shape_out, grid_in=grid, k_channels=4, out_channels=6)
    _load_into_torch_harmonics(ours, theirs)
    q, x = torch.randn(2, 8, *shape_out), torch.randn(2, 8, *shape_in)
    torch.testing.assert_close(ours(q, x), theirs(q, x, x), rtol=0, atol=1e-5)
