"""MultipoleAttention's default physical pyramid against a dense float64 reference built from its definition.

The reference (``_dense_reference``) rebuilds every level from the docstring's formulas with dense matrices:
per-axis assignment matrices of input cells to key cells (or of key cells to the input cell holding their
centre, ``n < m``), the window weights φ of each query as a dense matrix (``_window_weight``: the trapezoid of
the query's clamped position for the default linear taper, the clamped sliding window of its key cell for hard
windows) added as ``log φ`` to the scores, the relative-position
bias by explicit multilinear interpolation, and the local term as a masked softmax over the clamped window of
input cells. Nothing is shared with the implementation but the layer's parameters.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sciattn.multipole import MultipoleAttention

F64 = torch.float64


def _assign(n: int, m: int) -> torch.Tensor:
    """(m, n): key cell j collects input cell i (centre rule; weight shares when n < m)."""
    a = torch.zeros(m, n, dtype=F64)
    if n >= m:
        for i in range(n):
            a[math.floor((i + 0.5) * m / n), i] = 1.0
    else:
        src = [math.floor((j + 0.5) * n / m) for j in range(m)]
        for j, i in enumerate(src):
            a[j, i] = 1.0 / src.count(i)
    return a


def _kron(mats):
    out = mats[0]
    for t in mats[1:]:
        out = torch.kron(out, t)
    return out


def _interp(table, r, delta):
    """b_h(δ) for one displacement δ (d floats): multilinear on the nodes r'/R, r' = -R..R; (H,)."""
    node = [min(max((dl + 1) * r, 0.0), 2 * r) for dl in delta]
    low = [min(max(math.floor(nd), 0), 2 * r - 1) for nd in node]
    out = torch.zeros(table.shape[0], dtype=F64)
    for corner in itertools.product((0, 1), repeat=len(delta)):
        wgt = math.prod((nd - lo) if c else 1 - (nd - lo) for nd, lo, c in zip(node, low, corner))
        out = out + wgt * table[(slice(None), *[lo + c for lo, c in zip(low, corner)])]
    return out


def _window_weight(taper: str, xq: torch.Tensor, kpos: torch.Tensor, m, c) -> torch.Tensor:
    """(N, M) window weights φ(x_i, y_c) = Π_a φ_a of one level, from the definitions.

    Hard: 1 on the c cells starting at clamp(j - c//2, 0, m - c), j the query's key cell. Linear taper: the
    trapezoid φ_a = clamp((c+1)/2 - |u - k - o|, 0, 1) of the query's position u = x m - 1/2 between key-cell
    centres (k the key cell, o = c//2 - (c-1)/2), with u clamped to [c//2, m - c + c//2] (the positions whose
    window is not clamped by the domain: beyond them the window stops sliding and φ is frozen); φ = 1 on a level
    that one window holds (m = c)."""
    phi = torch.ones(xq.shape[0], kpos.shape[0], dtype=F64)
    for a in range(xq.shape[1]):
        ma, ca = m[a], c[a]
        if taper == "none":
            j = torch.floor(xq[:, a] * ma)
            start = (j - ca // 2).clamp(0, ma - ca)
            inside = (kpos[None, :, a] >= start[:, None]) & (kpos[None, :, a] < start[:, None] + ca)
            phi = phi * inside.to(F64)
        else:
            u = (xq[:, a] * ma - 0.5).clamp(ca // 2, ma - ca + ca // 2)
            o = ca // 2 - (ca - 1) / 2
            phi = phi * ((ca + 1) / 2 - (u[:, None] - kpos[None, :, a] - o).abs()).clamp(0.0, 1.0)
    return phi


def _dense_reference(layer: MultipoleAttention, x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    b, c_in, *n = x.shape
    d, h, dh = len(n), layer.n_heads, layer.head_dim
    big_n = math.prod(n)
    xs = x.reshape(b, c_in, big_n).transpose(1, 2)  # (B, N, C), C order
    w = torch.ones(b, big_n, dtype=F64) if weights is None else weights.expand(b, *n).reshape(b, big_n)
    wq, wk, wv = layer.qkv.weight.split(layer.dim)
    bq, bk, bv = layer.qkv.bias.split(layer.dim)
    q = (xs @ wq.T + bq).view(b, big_n, h, dh).transpose(1, 2)
    if layer.q_norm is not None:
        q = layer.q_norm(q)
    pos = torch.tensor(list(itertools.product(*[range(a) for a in n])), dtype=F64)  # (N, d) cell index
    xq = (pos + 0.5) / torch.tensor(n, dtype=F64)  # query positions in [0, 1]^d
    out = torch.zeros(b, h, big_n, dh, dtype=F64)
    if layer.local_window is not None:
        k = (xs @ wk.T + bk).view(b, big_n, h, dh).transpose(1, 2)
        v = (xs @ wv.T + bv).view(b, big_n, h, dh).transpose(1, 2)
        if layer.k_norm is not None:
            k = layer.k_norm(k)
        allowed = torch.ones(big_n, big_n, dtype=torch.bool)
        for a in range(d):
            lw = min(layer.local_window[a], n[a])
            start = (pos[:, a] - lw // 2).clamp(0, n[a] - lw)
            allowed &= (pos[None, :, a] >= start[:, None]) & (pos[None, :, a] < start[:, None] + lw)
        s = q @ k.transpose(-1, -2) / math.sqrt(dh) + torch.log(w)[:, None, None, :]
        s = s.masked_fill(~allowed, -math.inf)
        out = out + torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v
    for level, (m, c) in enumerate(layer.levels):
        a_mat = _kron([_assign(na, ma) for na, ma in zip(n, m)])  # (M, N)
        wc = w @ a_mat.T  # (B, M)
        xc = ((xs * w[..., None]).transpose(1, 2) @ a_mat.T).transpose(1, 2) / wc.clamp_min(1e-300)[..., None]
        big_m = math.prod(m)
        k = (xc @ wk.T + bk).view(b, big_m, h, dh).transpose(1, 2)
        v = (xc @ wv.T + bv).view(b, big_m, h, dh).transpose(1, 2)
        if layer.k_norm is not None:
            k = layer.k_norm(k)
        kpos = torch.tensor(list(itertools.product(*[range(a) for a in m])), dtype=F64)  # (M, d)
        phi = _window_weight(layer.window_taper, xq, kpos, m, c)  # (N, M)
        allowed = phi > 0
        s = q @ k.transpose(-1, -2) / math.sqrt(dh) + torch.log(wc)[:, None, None, :] + torch.log(phi)
        if layer.rel_bias_table is not None:
            bias = torch.zeros(h, big_n, big_m, dtype=F64)
            kc = (kpos + 0.5) / torch.tensor(m, dtype=F64)
            span = torch.tensor(c, dtype=F64) / torch.tensor(m, dtype=F64)  # window length, domain units
            for i in range(big_n):
                for jj in range(big_m):
                    if allowed[i, jj]:
                        bias[:, i, jj] = _interp(layer.rel_bias_table.detach(), layer.rel_pos_bias,
                                                 ((xq[i] - kc[jj]) / span).tolist())
            s = s + bias
        s = s.masked_fill(~allowed, -math.inf)
        att = torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v
        out = out + att * layer.level_weight[level].view(1, h, 1, 1)
    r = out.transpose(1, 2).reshape(b, big_n, layer.dim)
    if layer.gate_proj is not None:
        r = torch.nn.functional.silu(layer.gate_proj(xs)) * r
    y = layer.out_proj(r)
    return y.transpose(1, 2).reshape(b, layer.dim, *n)


def _layer(d, seed=0, **kw):
    torch.manual_seed(seed)
    layer = MultipoleAttention(4, 2, d, **kw).double()
    with torch.no_grad():
        layer.level_weight.uniform_(0.5, 1.5)
        if layer.rel_bias_table is not None:
            layer.rel_bias_table.normal_()
    return layer


# window_fraction 1/4, coarse_cells 2: key grids 8, 4, 2 per axis, so these grids cover multiples (reshape
# path), non-multiples above the key grid (index_add path) and grids coarser than it (n < m).
SHAPES_2D = [(16, 8), (12, 10), (5, 6), (24, 3)]


@pytest.mark.parametrize("shape", SHAPES_2D)
@pytest.mark.parametrize("extras", [{}, dict(rel_pos_bias=2, gate=True, qk_norm=True)])
def test_matches_dense_reference_2d_with_weights(shape, extras):
    layer = _layer(2, window_fraction=0.25, coarse_cells=2, **extras)
    assert [m for m, _ in layer.levels] == [(8, 8), (4, 4), (2, 2)]
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, *shape, dtype=F64, generator=g)
    w = torch.rand(2, *shape, dtype=F64, generator=g) + 0.1
    torch.testing.assert_close(layer(x, weights=w), _dense_reference(layer, x, w), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(layer(x), _dense_reference(layer, x, None), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", [(16, 8), (12, 10)])
def test_hard_windows_match_dense_reference_2d(shape):
    layer = _layer(2, window_fraction=0.25, coarse_cells=2, window_taper="none", rel_pos_bias=1)
    assert layer.window_taper == "none"
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 4, *shape, dtype=F64, generator=g)
    w = torch.rand(2, *shape, dtype=F64, generator=g) + 0.1
    torch.testing.assert_close(layer(x, weights=w), _dense_reference(layer, x, w), rtol=1e-10, atol=1e-10)
    tapered = _layer(2, window_fraction=0.25, coarse_cells=2, rel_pos_bias=1)
    assert (tapered(x, weights=w) - layer(x, weights=w)).abs().max() > 1e-3  # the taper changes the output


def test_taper_weights_are_continuous_and_frozen_at_the_boundary():
    """φ_a as a function of the query position: continuous (steps of 1e-6 change it by O(1e-6)), c - 1 keys of
    weight 1 and two edge keys summing to 1 away from the boundary, the hard clamped window near it."""
    from sciattn.multipole.physical import taper_weights

    m, c = 16, 4
    x = torch.linspace(0, m, 16001, dtype=F64)[None]  # positions in key cells
    keys = torch.arange(m)[None]
    phi = taper_weights(x, keys, m, c)[0]  # (P, m)
    assert (phi[1:] - phi[:-1]).abs().max() < 2e-3 + 1e-9  # steps of 1e-3 key cells
    assert torch.allclose(phi.sum(-1), torch.full((x.shape[1],), float(c), dtype=F64))
    interior = (x[0] > c // 2 + 0.5) & (x[0] < m - c + c // 2 + 0.5)
    assert ((phi[interior] > 0).sum(-1) == c + 1).any() and ((phi[interior] == 1).sum(-1) >= c - 1).all()
    frozen = phi[x[0] < c // 2 + 0.5]
    assert torch.equal(frozen, torch.cat([torch.ones(frozen.shape[0], c), torch.zeros(frozen.shape[0], m - c)], 1)
                       .to(F64))


@pytest.mark.parametrize("shape,kw", [((20,), dict(window_fraction=0.25, coarse_cells=2, rel_pos_bias=3)),
                                      ((37,), dict(window_fraction=0.125, coarse_cells=3, local_window=5)),
                                      ((6, 5, 4), dict(window_fraction=0.5, coarse_cells=2, rel_pos_bias=1)),
                                      ((8, 4, 4), dict(window_fraction=0.5, coarse_cells=2, local_window=(3, 1, 2)))])
@pytest.mark.parametrize("taper", ["linear", "none"])
def test_matches_dense_reference_1d_and_3d(shape, kw, taper):
    layer = _layer(len(shape), window_taper=taper, **kw)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 4, *shape, dtype=F64, generator=g)
    w = torch.rand(*shape, dtype=F64, generator=g) + 0.1
    torch.testing.assert_close(layer(x, weights=w), _dense_reference(layer, x, w), rtol=1e-10, atol=1e-10)


def test_zero_weights_remove_keys_and_poisoned_values_there_do_not_leak():
    """A zero quadrature weight is a mask: the cell is no key at any level nor in the local term."""
    layer = _layer(2, window_fraction=0.25, coarse_cells=2)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 12, 10, dtype=F64, generator=g)
    w = (torch.rand(1, 12, 10, generator=g) > 0.3).to(F64)
    w[0, :4, :4] = 0.0  # a whole key cell of level 0 and more: empty key cells
    y = layer(x, weights=w)
    torch.testing.assert_close(y, _dense_reference(layer, x, w), rtol=1e-10, atol=1e-10)
    x2 = x.clone()
    x2[:, :, w[0] == 0] = 1e3 * torch.randn_like(x2[:, :, w[0] == 0])
    real = w[0] > 0
    # outputs at the real cells are unchanged (the masked cells' own queries change, as their features do)
    torch.testing.assert_close(layer(x2, weights=w)[..., real], y[..., real], rtol=1e-10, atol=1e-10)


def test_default_levels_do_not_depend_on_the_resolution_and_cost_a_fixed_number_of_keys():
    layer = MultipoleAttention(8, 2, 2)
    assert layer.window_fraction == (0.125, 0.125) and layer.coarse_cells == (8, 8) and layer.local_window == (3, 3)
    assert [m for m, _ in layer.levels] == [(64, 64), (32, 32), (16, 16), (8, 8)]
    assert layer.plan((64, 64)) == layer.plan((1000, 1000)) == layer.levels
    assert layer.level_weight.shape == (4, 2)
    assert MultipoleAttention(8, 2, 2, max_levels=2).levels == layer.levels[:2]
    cells = MultipoleAttention(8, 2, 2, window=8)  # explicit cell windows: the input pyramid, as before
    assert cells.pyramid == "input" and len(cells.plan((256, 256))) == len(cells.plan((64, 64))) + 2


def test_gradients_match_finite_differences():
    layer = _layer(2, window_fraction=0.25, coarse_cells=2, rel_pos_bias=2, gate=True)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1, 4, 9, 8, dtype=F64, generator=g, requires_grad=True)
    w = torch.rand(9, 8, dtype=F64, generator=g) + 0.1
    assert torch.autograd.gradcheck(lambda t: layer(t, weights=w), (x,), eps=1e-6, atol=1e-6)
    layer(x, weights=w).square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_chunked_and_tiled_level_attention_equal_one_call_per_key_cell():
    """Chunks of groups and tiles of key cells (a shared halo, masked per query) change nothing."""
    from sciattn.multipole.physical import level_attention

    g = torch.Generator().manual_seed(7)
    for n, m, window in (((12, 10), (8, 4), (3, 2)), ((32, 16), (8, 8), (4, 4)), ((16,), (16,), (3,))):
        q = torch.randn(2, *n, 3, 4, dtype=F64, generator=g)
        k, v = (torch.randn(2, *m, 3, 4, dtype=F64, generator=g) for _ in range(2))
        logw = torch.randn(2, *m, dtype=F64, generator=g)
        for taper in (True, False):
            one = level_attention(q, k, v, logw, window, 0.5, scores_per_call=1 << 30, tiles=(1,) * len(n),
                                  taper=taper)
            for tiles in (None, (2,) * len(n), (4,) * len(n)):
                out = level_attention(q, k, v, logw, window, 0.5, scores_per_call=1, tiles=tiles, taper=taper)
                torch.testing.assert_close(out, one, rtol=1e-12, atol=1e-12)


def test_one_layer_converges_under_refinement_of_a_smooth_field():
    """Same weights, a smooth 1-D field at 64, 128, ..., 1024 cells: cell means of the output onto the 64 cells
    converge to the finest grid's at about first order (the local term's reach is three cells)."""
    torch.manual_seed(0)
    layer = MultipoleAttention(8, 2, 1).double().eval()

    def run(n):
        t = (torch.arange(n, dtype=F64) + 0.5) / n
        feats = torch.stack([torch.sin(2 * math.pi * (j + 1) * t + j) for j in range(8)])[None]
        with torch.no_grad():
            y = layer(feats)
        return y.reshape(1, 8, 64, n // 64).mean(-1)

    ref = run(1024)
    err = {n: float((run(n) - ref).norm() / ref.norm()) for n in (64, 128, 256)}
    assert err[128] <= 0.6 * err[64] and err[256] <= 0.6 * err[128] and err[128] < 0.05, err


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(pyramid="physical", window=4), "window: expected None with pyramid='physical'"),
        (dict(pyramid="pyr"), "pyramid"),
        (dict(unpool="linear"), "pool: expected pool='avg' and unpool='nearest'"),
        (dict(window=4, local_window=3), "local_window: expected None or 0"),
        (dict(local_window=-1), "local_window"),
        (dict(coarse_cells=0), "coarse_cells"),
        (dict(window_fraction=0.0), "window_fraction: expected a float"),
        (dict(window_taper="cosine"), "window_taper"),
        (dict(window=4, window_taper="linear"), "window_taper: expected None or 'none' with pyramid='input'"),
    ],
)
def test_errors_name_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MultipoleAttention(4, 2, 2, **kwargs)


def test_local_term_for_symbolic_sizes_equals_the_tiled_one():
    from sciattn.multipole.physical import _local_offsets, local_attention

    g = torch.Generator().manual_seed(8)
    for n, lw in (((12, 10), (3, 3)), ((9,), (5,)), ((5, 4, 6), (3, 1, 2))):
        q, k, v = (torch.randn(2, *n, 3, 4, dtype=F64, generator=g) for _ in range(3))
        logw = torch.log(torch.rand(2, *n, dtype=F64, generator=g))
        logw[0, 0] = -math.inf
        torch.testing.assert_close(_local_offsets(q, k, v, logw, lw, 0.5), local_attention(q, k, v, logw, lw, 0.5),
                                   rtol=1e-12, atol=1e-12)


def _perturbed_output(model, n):
    """Add ``0.1·N(0, 1)`` to every parameter of ``model`` (so that none keeps its initial value) and run it on a random
    ``(1, 1, n, n)`` input: returns the input and the output (no gradients)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
        x = torch.randn(1, 1, n, n)
        return x, model(x)


def _saved_and_loaded(model, path):
    """``model`` written as a checkpoint at ``path`` (identity normalisers) and loaded back with ``load_model``, which
    migrates its stored config."""
    from sciattn.pde_data.normalizers import UnitGaussianNormalizer
    from sciattn.train.checkpoint import load_model, save_checkpoint

    norm = UnitGaussianNormalizer(torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    loaded, *_ = load_model(save_checkpoint(path, model=model, x_normalizer=norm, y_normalizer=norm))
    return loaded


def test_a_mano_config_stored_before_the_pyramid_key_rebuilds_the_input_pyramid(tmp_path):
    """Configs store every constructor key; one written before ``pyramid`` existed meant the input pyramid for
    the same window_fraction / coarse_cells values, so load_model fills ``pyramid="input"`` when it is absent."""
    from sciattn.operators import create_operator

    torch.manual_seed(0)
    legacy = create_operator("mano", in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2, pyramid="input")
    x, want = _perturbed_output(legacy, 40)
    old = {k: v for k, v in legacy.config.items() if k != "pyramid"}
    assert old["window_fraction"] == 0.125 and old["coarse_cells"] == 8  # the same values now mean "physical"
    legacy.config = old
    loaded = _saved_and_loaded(legacy, tmp_path / "old.pt")
    assert loaded.blocks[0].attn.pyramid == "input"
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), want, rtol=0, atol=0)
    # a config written now holds the key (None: the physical pyramid) and is left as it is
    new = create_operator("mano", in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2)
    assert "pyramid" in new.config and new.blocks[0].attn.pyramid == "physical"
    back = _saved_and_loaded(new, tmp_path / "new.pt")
    assert back.blocks[0].attn.pyramid == "physical"
    with torch.no_grad():
        torch.testing.assert_close(back(x), new(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["mano", "mano_extended"])
def test_a_physical_config_stored_before_the_taper_key_loads_with_hard_windows(tmp_path, name):
    """Configs saved with ``pyramid="physical"`` (2026-12-02, before ``window_taper``) meant the hard windows: they
    load with ``window_taper="none"`` and reproduce their outputs exactly; a config written now keeps the taper."""
    from sciattn.operators import create_operator

    kw = dict(in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2)
    if name == "mano_extended":
        kw.update(head_width=4, head_modes=4, head_layers=1, rel_pos_bias=2)
    torch.manual_seed(0)
    legacy = create_operator(name, pyramid="physical", window_taper="none", **kw)
    x, want = _perturbed_output(legacy, 64)
    assert legacy.config["window_taper"] == "none"
    legacy.config = {k: v for k, v in legacy.config.items() if k != "window_taper"}
    loaded = _saved_and_loaded(legacy, tmp_path / "old.pt")
    assert loaded.blocks[0].attn.window_taper == "none"
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), want, rtol=0, atol=0)
        tapered = create_operator(name, pyramid="physical", **kw)
        tapered.load_state_dict(legacy.state_dict())
        assert (tapered(x) - want).abs().max() > 1e-6  # the default (tapered) layer would not reproduce them
    new = create_operator(name, **kw)
    assert "window_taper" in new.config and new.blocks[0].attn.window_taper == "linear"
    back = _saved_and_loaded(new, tmp_path / "new.pt")
    assert back.blocks[0].attn.window_taper == "linear"
    with torch.no_grad():
        torch.testing.assert_close(back(x), new(x), rtol=0, atol=0)
