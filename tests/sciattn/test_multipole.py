"""Multipole attention: windowed functional and multiscale layer against independent dense formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sciattn import BackendError
from sciattn._dispatch import backends_for
from sciattn.multipole import MultipoleAttention, window_attention

# Backends that also differentiate on the CPU (flex has no CPU backward: test_multipole_flex.py).
CPU_BACKENDS = [b for b in backends_for("multipole") if b.backward_devices is None or "cpu" in b.backward_devices]
F64 = torch.float64


def _cells(shape):
    """Integer coordinates ``(N, d)`` of a grid in C order."""
    return torch.tensor(list(itertools.product(*[range(n) for n in shape])), dtype=torch.long)


def _dense_window(q, k, v, w, geometry, bias=None):
    """O(N²) masked softmax Σ_j ω_j e^{s_ij} v_j / Σ_j ω_j e^{s_ij} over same-window pairs.

    q, k: (B, H, N, D) flattened in C order; geometry: (grid shape, window); w: (B, N), 0 = excluded.
    """
    shape, window = geometry
    idx = _cells(shape)
    win = torch.tensor(window)
    same = (idx[:, None] // win == idx[None] // win).all(-1)  # (N, N)
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1]) + torch.log(w)[:, None, None, :]
    if bias is not None:
        local = idx % win
        p = (local * torch.tensor([math.prod(window[a + 1 :]) for a in range(len(window))])).sum(-1)
        s = s + bias[:, p][:, :, p]
    s = s.masked_fill(~same, -math.inf)
    a = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return a @ v


def _grid_to_tokens(t, d):  # (B, H, *n, D) -> (B, H, N, D)
    return t.flatten(2, 1 + d)


CASES = [((7, 5), (3, 2)), ((11,), (4,)), ((5, 4, 3), (2, 3, 2))]


@pytest.mark.parametrize("backend", [b.name for b in CPU_BACKENDS])
@pytest.mark.parametrize("shape,window", CASES)
def test_one_level_matches_dense_formula_with_weights_mask_bias_and_padding(backend, shape, window):
    g = torch.Generator().manual_seed(1)
    d, b, h = len(shape), 2, 2
    p = math.prod(window)
    q, k = (torch.randn(b, h, *shape, 3, dtype=F64, generator=g) for _ in range(2))
    v = torch.randn(b, h, *shape, 4, dtype=F64, generator=g)
    w = torch.rand(b, *shape, dtype=F64, generator=g) + 0.1
    mask = torch.rand(b, *shape, generator=g) > 0.3
    bias = torch.randn(h, p, p, dtype=F64, generator=g)
    got = window_attention(q, k, v, window, weights=w, mask=mask, bias=bias, backend=backend)
    wk = (w * mask).flatten(1)
    want = _dense_window(*(_grid_to_tokens(t, d) for t in (q, k, v)), wk, (shape, window), bias)
    torch.testing.assert_close(_grid_to_tokens(got, d), want, rtol=1e-11, atol=1e-12)


def test_uniform_weights_equal_plain_windowed_softmax_and_scale_cancels():
    q, k, v = (torch.randn(1, 2, 12, 3, dtype=F64) for _ in range(3))
    qw, kw, vw = (t.unflatten(2, (3, 4)) for t in (q, k, v))
    plain = (torch.softmax(qw @ kw.transpose(-1, -2) / math.sqrt(3), -1) @ vw).flatten(2, 3)
    torch.testing.assert_close(window_attention(q, k, v, 4), plain)
    w = torch.rand(12, dtype=F64) + 0.1
    torch.testing.assert_close(window_attention(q, k, v, 4, weights=w), window_attention(q, k, v, 4, weights=9 * w))


@pytest.mark.parametrize("backend", [b.name for b in CPU_BACKENDS])
def test_padding_is_invisible_even_when_poisoned_with_nan(backend):
    """A 7x5 grid padded internally equals the same grid padded by hand to 9x6 with NaN keys,
    values and weights in the padding, excluded through the mask."""
    g = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 2, 7, 5, 3, dtype=F64, generator=g) for _ in range(2))
    v = torch.randn(2, 2, 7, 5, 4, dtype=F64, generator=g)
    w = torch.rand(2, 7, 5, dtype=F64, generator=g) + 0.1
    ref = window_attention(q, k, v, (3, 2), weights=w, backend=backend)

    def pad(t, value):
        out = torch.full((*t.shape[:2], 9, 6, *t.shape[4:]), value, dtype=F64)
        out[:, :, :7, :5] = t
        return out

    qp = pad(q, 0.5).requires_grad_()
    kp, vp = pad(k, math.nan).requires_grad_(), pad(v, math.inf).requires_grad_()
    wp = pad(w[:, None], math.nan)[:, 0]
    mask = torch.zeros(2, 9, 6, dtype=torch.bool)
    mask[:, :7, :5] = True
    out = window_attention(qp, kp, vp, (3, 2), weights=wp, mask=mask, backend=backend)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, :, :7, :5], ref, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad(out.square().sum(), (qp, kp, vp))
    assert all(torch.isfinite(gr).all() for gr in grads)
    # A window whose keys are all masked returns zero.
    mask[:, :3, :2] = False
    out = window_attention(qp, kp, vp, (3, 2), weights=wp, mask=mask, backend=backend)
    assert torch.equal(out[:, :, :3, :2], torch.zeros_like(out[:, :, :3, :2]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("backend", [b for b in CPU_BACKENDS if b.name != "reference"], ids=lambda b: b.name)
def test_fast_backends_match_float64_reference_outputs_and_gradients(backend, dtype):
    g = torch.Generator().manual_seed(3)
    base = [torch.randn(2, 3, 6, 7, 8, dtype=F64, generator=g) for _ in range(3)]
    w = torch.rand(2, 6, 7, dtype=F64, generator=g) + 0.1
    mask = torch.rand(2, 6, 7, generator=g) > 0.2
    bias = torch.randn(2, 3, 16, 16, dtype=F64, generator=g)
    ins = [t.to(dtype).requires_grad_() for t in base]
    refs = [t.clone().requires_grad_() for t in base]
    out = window_attention(*ins, 4, weights=w.to(dtype), mask=mask, bias=bias.to(dtype), backend=backend.name)
    want = window_attention(*refs, 4, weights=w, mask=mask, bias=bias, backend="reference")
    rtol, atol = backend.tolerances[dtype]
    torch.testing.assert_close(out.double(), want, rtol=rtol * 10, atol=atol * 10)
    ct = torch.randn_like(want)
    grads = torch.autograd.grad(out, ins, ct.to(dtype))
    grads_ref = torch.autograd.grad(want, refs, ct)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a.double(), b, rtol=rtol * 10, atol=atol * 10)


# ------------------------------------------------------------------------------ the layer
def _layer_oracle(layer, x, weights):
    """Explicit composition from the layer's parameters: weighted-mean pooling matrices, the
    dense windowed softmax at every level, nearest upsampling, per-head level weights."""
    b, c, *shape = x.shape
    shape, s, h, dh = tuple(shape), layer.pool_factor, layer.n_heads, layer.head_dim
    win = layer.window_cells(shape)
    shapes = [shape]
    while any(n > w for n, w in zip(shapes[-1], win)):
        shapes.append(tuple((n + s - 1) // s for n in shapes[-1]))
    # children[l][c, j] = 1 when fine cell j of level l lies in coarse cell c of level l+1
    children = [(_cells(f)[None] // s == _cells(cs)[:, None]).all(-1).to(F64) for f, cs in zip(shapes, shapes[1:])]
    feats = [x.flatten(2).transpose(1, 2)]  # (B, N, C)
    ws = [(torch.ones(math.prod(shape), dtype=F64) if weights is None else weights.flatten()).expand(b, -1)]
    for a in children:
        ws.append(ws[-1] @ a.T)
        feats.append((a[None] * ws[-2][:, None, :]) @ feats[-1] / ws[-1][..., None])
    wq, wk, wv = layer.qkv.weight.chunk(3)
    bq, bk, bv = layer.qkv.bias.chunk(3)
    attn = []
    for f, wl, n in zip(feats, ws, shapes):
        heads = [(f @ m.T + bb).unflatten(-1, (h, dh)).transpose(1, 2) for m, bb in ((wq, bq), (wk, bk), (wv, bv))]
        z = _dense_window(*heads, wl, (n, tuple(min(a, m) for a, m in zip(win, n))))
        attn.append(z.transpose(1, 2).flatten(2))  # (B, N, C), head-major channels
    r = attn[-1]
    for lvl in range(len(shapes) - 1, 0, -1):
        gamma = layer.level_weight[lvl - 1].repeat_interleave(dh)
        r = attn[lvl - 1] + (children[lvl - 1].T @ r) * gamma
    out = r @ layer.out_proj.weight.T + layer.out_proj.bias
    return out.transpose(1, 2).reshape(b, c, *shape), len(shapes)


@pytest.mark.parametrize("shape,window,levels", [((7, 6), 2, 3), ((13,), 3, 4), ((5, 4, 3), (2, 3, 2), 3)])
def test_several_levels_match_explicit_composition(shape, window, levels):
    torch.manual_seed(4)
    layer = MultipoleAttention(6, 2, len(shape), window=window).double()
    with torch.no_grad():
        layer.level_weight.copy_(torch.rand_like(layer.level_weight) * 2 - 0.5)
    x = torch.randn(2, 6, *shape, dtype=F64)
    w = torch.rand(*shape, dtype=F64) + 0.2
    want, n_levels = _layer_oracle(layer, x, w)
    assert n_levels == levels == len(layer.plan(shape))
    torch.testing.assert_close(layer(x, weights=w), want, rtol=1e-10, atol=1e-12)
    want_uniform, _ = _layer_oracle(layer, x, None)
    torch.testing.assert_close(layer(x), want_uniform, rtol=1e-10, atol=1e-12)


def test_learned_resampling_starts_as_average_and_nearest():
    torch.manual_seed(5)
    plain = MultipoleAttention(6, 3, 2, window=3).double()
    learned = MultipoleAttention(6, 3, 2, window=3, pool="conv", unpool="transposed").double()
    learned.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 6, 11, 9, dtype=F64)
    torch.testing.assert_close(learned(x), plain(x), rtol=1e-10, atol=1e-12)


def test_receptive_field_is_global_with_levels_and_local_with_one():
    torch.manual_seed(6)
    x = torch.randn(1, 4, 16, 16)
    bumped = x.clone()
    bumped[..., 0, 0] += 1.0
    multi = MultipoleAttention(4, 2, 2, window=2)
    assert len(multi.plan((16, 16))) == 4
    with torch.no_grad():
        assert (multi(bumped) - multi(x))[..., -1, -1].abs().max() > 1e-6
        single = MultipoleAttention(4, 2, 2, window=2, max_levels=1)
        diff = single(bumped) - single(x)
    assert torch.equal(diff[..., 2:, 2:], torch.zeros_like(diff[..., 2:, 2:]))
    assert diff[..., :2, :2].abs().max() > 1e-6


def test_physical_window_scales_with_resolution():
    phys = MultipoleAttention(4, 1, 2, pyramid="input", window_fraction=0.125)
    coarse, fine = phys.plan((64, 64)), phys.plan((128, 128))
    assert coarse[0][1] == (8, 8) and fine[0][1] == (16, 16)
    assert len(coarse) == len(fine) == 4  # the same physical hierarchy at both resolutions
    assert coarse[-1][0] == (8, 8) and fine[-1][0] == (16, 16)
    cells = MultipoleAttention(4, 1, 2, window=8)
    assert [len(cells.plan((n, n))) for n in (64, 128, 256)] == [4, 5, 6]
    aniso = MultipoleAttention(4, 1, 2, pyramid="input", window_fraction=(0.25, 0.01))
    assert aniso.window_cells((50, 37)) == (13, 1)


def test_physical_window_converges_under_refinement():
    """With window_fraction the hierarchy is the same at every resolution, so refining a smooth
    input makes the output converge (cell averages of the 2n-grid output against the n-grid one)."""
    torch.manual_seed(7)
    layer = MultipoleAttention(4, 2, 1, pyramid="input", window_fraction=1 / 8).double()

    def run(n):
        t = (torch.arange(n, dtype=F64) + 0.5) / n
        x = torch.stack([torch.sin(2 * math.pi * t), torch.cos(2 * math.pi * t), t, torch.sin(4 * math.pi * t) ** 2])
        with torch.no_grad():
            return layer(x[None])

    outs = {n: run(n) for n in (64, 128, 256, 512)}
    errs = [(outs[2 * n].unflatten(-1, (n, 2)).mean(-1) - outs[n]).abs().max().item() for n in (64, 128, 256)]
    assert errs[0] > errs[1] > errs[2] and errs[1] / errs[2] > 1.6


def test_physical_pyramid_plan_fixes_the_coarse_grids_and_matches_the_default_at_training_resolution():
    phys = MultipoleAttention(4, 1, 2, pyramid="input", window_fraction=0.125, coarse_cells=8)
    default = MultipoleAttention(4, 1, 2, pyramid="input", window_fraction=0.125)
    for n in (64, 48):  # at or below the training resolution c / f = 64 the pyramids coincide
        assert phys.plan((n, n)) == default.plan((n, n))
    assert phys.plan((256, 256)) == [((256, 256), (32, 32)), ((32, 32), (8, 8)), ((16, 16), (8, 8)), ((8, 8), (8, 8))]
    assert phys.plan((100, 100))[1:] == phys.plan((64, 64))[1:]
    aniso = MultipoleAttention(4, 1, 2, pyramid="input", window_fraction=(0.25, 0.125), coarse_cells=(4, 8))
    assert aniso.plan((64, 128)) == [((64, 128), (16, 16)), ((8, 32), (4, 8)), ((4, 16), (4, 8)), ((2, 8), (2, 8))]
    torch.manual_seed(11)
    default.load_state_dict(phys.state_dict())
    x = torch.randn(2, 4, 64, 64)
    with torch.no_grad():
        assert torch.equal(phys(x), default(x))


def test_physical_pyramid_sees_a_refined_field_as_at_the_training_resolution():
    """A 64² field refined to 256² by copying each cell into 4×4 (the same function, rough at the
    64² scale): with the physical pyramid every level holds exactly what it held at 64², so the
    output at the 64² nodes is the 64² output; the default pyramid pools 2×2 copies at 256² and
    its far field changes."""
    torch.manual_seed(12)
    phys = MultipoleAttention(6, 2, 2, pyramid="input", window_fraction=0.125, coarse_cells=8, gate=True, qk_norm=True).double()
    with torch.no_grad():
        phys.level_weight.uniform_(0.5, 1.5)
    default = MultipoleAttention(6, 2, 2, pyramid="input", window_fraction=0.125, gate=True, qk_norm=True).double()
    default.load_state_dict(phys.state_dict())
    x64 = torch.randn(1, 6, 64, 64, dtype=F64)
    x256 = x64.repeat_interleave(4, dim=2).repeat_interleave(4, dim=3)
    with torch.no_grad():
        want = phys(x64)
        torch.testing.assert_close(phys(x256)[..., ::4, ::4], want, rtol=1e-10, atol=1e-12)
        assert (default(x256)[..., ::4, ::4] - want).abs().max() > 1e-2


@pytest.mark.parametrize("unpool", ["nearest", "linear"])
@pytest.mark.parametrize("shape", [(100, 100), (50, 37), (200, 24)])
def test_physical_pyramid_runs_at_any_size_with_weights(shape, unpool):
    layer = MultipoleAttention(4, 2, 2, pyramid="input", window_fraction=0.125, coarse_cells=8, unpool=unpool).double()
    x = torch.randn(2, 4, *shape, dtype=F64, requires_grad=True)
    w = torch.rand(*shape, dtype=F64) + 0.1
    y = layer(x, weights=w)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all() and layer.level_weight.grad.abs().sum() > 0
    # a zero-weight (masked) region is invisible as keys at every level, coarse ones included
    w0 = w.clone()
    w0[: shape[0] // 4] = 0
    poisoned = x.detach().clone()
    poisoned[:, :, : shape[0] // 4] = 1e3
    with torch.no_grad():
        a, b = layer(x.detach(), weights=w0), layer(poisoned, weights=w0)
    cut = shape[0] // 4
    torch.testing.assert_close(a[:, :, cut:], b[:, :, cut:], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(48, 48), (50, 37), (100, 100)])
def test_any_grid_size_returns_the_input_shape(shape):
    layer = MultipoleAttention(8, 2, 2, window=8)
    x = torch.randn(1, 8, *shape)
    with torch.no_grad():
        y = layer(x)
    assert y.shape == x.shape and torch.isfinite(y).all()


@pytest.mark.parametrize("pool,unpool", [("avg", "nearest"), ("conv", "linear"), ("avg", "transposed")])
@pytest.mark.parametrize("shape,window", [((37,), 4), ((9, 7, 5), 3)])
def test_1d_and_3d_forward_backward(shape, window, pool, unpool):
    layer = MultipoleAttention(4, 2, len(shape), window=window, pool=pool, unpool=unpool, pool_factor=3)
    x = torch.randn(2, 4, *shape, requires_grad=True)
    y = layer(x, weights=torch.rand(*shape) + 0.1)
    assert y.shape == x.shape
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all() and layer.level_weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "kwargs,x_shape,match",
    [
        (dict(window=8), (1, 4, 6, 20), r"x: expected a grid of at least window=\(8, 8\)"),
        (dict(window=2), (1, 5, 6, 6), "x: expected size 4 along axis 1 \\(channels\\)"),
        (dict(window=2), (1, 4, 6), "x: expected a 4-D tensor"),
        (dict(window=2, pyramid="input", window_fraction=0.5), None, "window_fraction: expected None when window"),
        (dict(pyramid="input", window_fraction=1.5), None, "window_fraction: expected a float"),
        (dict(window=(2, 0)), None, "window: expected a positive int"),
        (dict(pool="max"), None, "pool: expected one of"),
        (dict(unpool="cubic"), None, "unpool: expected one of"),
        (dict(pool_factor=1), None, "pool_factor: expected an int >= 2"),
        (dict(spatial_dims=4), None, "spatial_dims: expected 1, 2 or 3"),
        (dict(n_heads=3), None, "n_heads: expected a divisor"),
        (dict(window=4, coarse_cells=8), None, "coarse_cells: expected None unless window_fraction"),
        (dict(pyramid="input", window_fraction=0.25, coarse_cells=4, pool="conv"), None, "coarse_cells: expected pool='avg'"),
        (dict(pyramid="input", window_fraction=0.25, coarse_cells=4, unpool="transposed"), None, "coarse_cells: expected pool='avg'"),
        (dict(pyramid="input", window_fraction=0.25, coarse_cells=0), None, "coarse_cells: expected a positive int"),
    ],
)
def test_layer_errors_name_the_argument(kwargs, x_shape, match):
    args = dict(dim=4, n_heads=2, spatial_dims=2)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        MultipoleAttention(**args)(torch.randn(*x_shape))


def test_layer_rejects_non_finite_input_and_bad_weights():
    layer = MultipoleAttention(4, 2, 2, window=2)
    x = torch.randn(1, 4, 6, 6)
    with pytest.raises(ValueError, match="x: expected finite values, got 1 NaN"):
        layer(x.index_put((torch.tensor(0),) * 4, torch.tensor(math.nan)))
    with pytest.raises(ValueError, match=r"weights: expected shape \(6, 6\)"):
        layer(x, weights=torch.ones(5, 6))
    with pytest.raises(ValueError, match="weights: expected non-negative"):
        layer(x, weights=-torch.ones(6, 6))



def test_layer_validate_false_skips_value_checks_only():
    layer = MultipoleAttention(4, 2, 2, window=2)
    x = torch.randn(1, 4, 6, 6)
    w = torch.rand(6, 6) + 0.1
    torch.testing.assert_close(layer(x, weights=w, validate=False), layer(x, weights=w))
    layer(x, weights=-torch.ones(6, 6), validate=False)  # values unchecked: no error
    with pytest.raises(ValueError, match=r"weights: expected shape \(6, 6\)"):  # shapes always checked
        layer(x, weights=torch.ones(5, 6), validate=False)

@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(q=torch.randn(2, 3)), "q: expected a 4-D or 5-D or 6-D tensor"),
        (dict(k=torch.randn(1, 2, 6, 4, 2)), "k: expected the shape of q"),
        (dict(v=torch.randn(1, 2, 6, 4, 3)), "v: expected shape"),
        (dict(window=(2, 2, 2)), "window: expected an int or 2 ints"),
        (dict(window=0), "window: expected a positive int"),
        (dict(weights=torch.rand(6, 4)), r"weights: expected shape \(6, 5\) or \(1, 6, 5\)"),
        (dict(weights=-torch.rand(6, 5)), "weights: expected non-negative"),
        (dict(mask=torch.ones(6, 5, dtype=torch.bool)), r"mask: expected shape \(1, 6, 5\)"),
        (dict(mask=torch.ones(1, 6, 5)), "mask: expected dtype torch.bool"),
        (dict(bias=torch.randn(2, 4, 3)), r"bias: expected shape \(2, 4, 4\)"),
        (dict(backend="nope"), "backend: expected one of"),
    ],
)
def test_functional_errors_name_the_argument(kwargs, match):
    args = dict(q=torch.randn(1, 2, 6, 5, 2), k=torch.randn(1, 2, 6, 5, 2), v=torch.randn(1, 2, 6, 5, 3), window=2)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError, BackendError), match=match):
        window_attention(**args)
