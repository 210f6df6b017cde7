"""The extended MANO (``mano_extended``): physical-unit settings (one config at any resolution), the
stencil lift, relative-position bias, gate, QK-norm, GLU and spectral head, and its defaults."""

from __future__ import annotations

import itertools
import math
import tomllib
from pathlib import Path

import pytest
import torch

from sciattn.domain import fourier_resample, resample_field
from sciattn.multipole import MultipoleAttention
from sciattn.operators import create_operator

F64 = torch.float64
CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "darcy64_mano.toml"
# Every extended option off: the options a test sets are then the only ones in play.
BARE = dict(window=8, lift_stencil=1, lift_spacing=None, rel_pos_bias=0, gate=False, qk_norm=False, ffn="mlp",
            head="pointwise", head_grid=None)
SMALL = dict(width=8, n_layers=2, n_heads=2, head_width=8, head_modes=6, head_layers=2)


def _model(**kw):
    cfg = dict(in_channels=1, out_channels=1, width=16, n_layers=2, n_heads=2, **BARE)
    cfg.update(kw)
    return create_operator("mano_extended", **cfg).eval()


def _smooth_input(n):
    """A smooth field sampled on the ``n × n`` grid of nodes ``i / n`` (the package's grid convention)."""
    t = torch.arange(n, dtype=F64) / n
    x = torch.sin(2 * math.pi * t)[:, None] * torch.cos(2 * math.pi * t)[None] + 0.5 * t[:, None] * t[None]
    return x[None, None].float()


def test_defaults_are_the_benchmarked_config():
    """The registry defaults are the ``[model]`` of darcy64_mano.toml, which names this operator."""
    model = tomllib.loads(CONFIG.read_text())["model"]
    assert model.pop("name") == "mano_extended"
    defaults = create_operator("mano_extended", in_channels=1, out_channels=1).config
    assert {k: defaults[k] for k in model} == model


@pytest.mark.parametrize("shape", [(48, 48), (100, 100), (50, 37)])
def test_the_default_runs_unchanged_at_other_sizes(shape):
    model = create_operator("mano_extended", in_channels=1, out_channels=1, **SMALL).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 1, *shape))
    assert out.shape == (1, 1, *shape) and torch.isfinite(out).all()


def _trains_at_32_and_64(cfg):
    for n in (32, 64):
        torch.manual_seed(0)
        model = create_operator("mano_extended", in_channels=1, out_channels=1, **cfg)
        x = _smooth_input(n).repeat(2, 1, 1, 1) + 0.1 * torch.randn(2, 1, n, n)
        y = torch.tanh(2 * x) + x.mean()
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        losses = []
        for _ in range(6):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.8 * losses[0], (n, losses)


def test_one_config_trains_at_32_and_64_without_edits():
    """The shipped [model] section at two training resolutions, its physical settings (window fraction, coarse
    cells, stencil spacing, bias, head grid) unchanged, smaller widths for time: a few Adam steps on one batch
    lower the loss at both (no setting is stated for a resolution any more)."""
    cfg = {k: v for k, v in tomllib.loads(CONFIG.read_text())["model"].items() if k != "name"}
    _trains_at_32_and_64({**cfg, "width": 16, "n_layers": 1, "head_width": 8, "head_layers": 1})


@pytest.mark.slow
def test_the_shipped_config_trains_at_32_and_64_without_edits():
    """The same with the shipped [model] section exactly (about 100 s on one thread)."""
    _trains_at_32_and_64({k: v for k, v in tomllib.loads(CONFIG.read_text())["model"].items() if k != "name"})


def test_head_grid_finer_than_the_input_interpolates():
    """``head_grid=64`` on a 32² input: the head reads the latent field at the 64 nodes by multilinear
    interpolation (``resample_field``) and evaluates its series back on the 32 nodes (``fourier_resample``)."""
    torch.manual_seed(7)
    head = _model(head="spectral", head_width=6, head_modes=6, head_layers=1, head_grid=64).proj
    h = torch.randn(1, 16, 32, 32)
    with torch.no_grad():
        got = head(h)
        z = head.lift(h.movedim(1, -1)).movedim(-1, 1)
        k = fourier_resample(head.spectral[0](resample_field(z, (64, 64))), (32, 32))
        want = head.out(torch.nn.functional.gelu(k + head.skips[0](z.movedim(1, -1)).movedim(-1, 1)))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_head_grid_finer_than_the_input_costs_an_interpolation_error():
    """On a band-limited latent field the head computes the same operator at 64² and at 32² only up to the
    interpolation onto its 64 nodes: measured 0.7% (max, relative), not the float32 rounding that a head grid of
    32 (or any nested input) gives."""
    torch.manual_seed(7)
    kw = dict(head="spectral", head_width=6, head_modes=6, head_layers=1)
    fine = _model(**kw, head_grid=64).proj
    own = _model(**kw, head_grid=32).proj
    own.load_state_dict(fine.state_dict())

    def field(n):
        t = torch.arange(n, dtype=torch.float32) / n
        return torch.stack([torch.sin(2 * math.pi * (c % 3 + 1) * t)[:, None] * torch.cos(2 * math.pi * t)[None]
                            + 0.1 * c for c in range(16)])[None]

    with torch.no_grad():
        ref = fine(field(64))[..., ::2, ::2]
        scale = ref.abs().max()
        interpolated = (fine(field(32)) - ref).abs().max() / scale
        nested = (own(field(32)) - ref).abs().max() / scale
    assert 1e-3 < interpolated < 0.02 and nested < 1e-5, (interpolated, nested)


# ------------------------------------------------------------------ stencil lift
def _lift_input(model, x):
    from sciattn.domain import Grid

    return torch.cat([x, Grid.from_field(x, model.spatial_dims).coordinate_channels(x.shape[0], x.dtype)], dim=1)


def test_stencil_lift_of_one_cell_is_a_zero_padded_convolution():
    torch.manual_seed(5)
    model = _model(lift_stencil=3, window=4)
    x = torch.randn(2, 1, 12, 10)
    u = _lift_input(model, x)
    lift = model.lift
    weight = lift.fc1.weight.reshape(16, 3, 3, 3).permute(0, 3, 1, 2)  # taps (o1, o2) outer, channels inner
    hidden = torch.nn.functional.conv2d(u, weight, lift.fc1.bias, padding=1)
    want = torch.einsum("oc,bc...->bo...", lift.fc2.weight, torch.nn.functional.gelu(hidden))
    want = want + lift.fc2.bias.reshape(1, -1, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(lift(u), want, rtol=1e-5, atol=1e-5)


def test_physical_stencil_sees_the_same_points_at_every_resolution():
    """With lift_spacing = 1/16 the lift at 32 and 64 nodes per axis, on the nodes shared with the
    16-node grid, equals the lift at 16 nodes: the stencil reaches the same physical points."""
    torch.manual_seed(6)
    model = _model(lift_stencil=3, lift_spacing=1 / 16, window=4)
    fine = _smooth_input(64)
    with torch.no_grad():
        lifted = {n: model.lift(_lift_input(model, fine[..., :: 64 // n, :: 64 // n])) for n in (16, 32, 64)}
    torch.testing.assert_close(lifted[32][..., ::2, ::2], lifted[16])
    torch.testing.assert_close(lifted[64][..., ::4, ::4], lifted[16])
    cells = _model(lift_stencil=3, window=4)  # a stencil of one cell reaches other points
    with torch.no_grad():
        one_cell = {n: cells.lift(_lift_input(cells, fine[..., :: 64 // n, :: 64 // n])) for n in (16, 32)}
    assert not torch.allclose(one_cell[32][..., ::2, ::2], one_cell[16], atol=1e-3)


def test_fractional_stencil_spacing_interpolates_linearly():
    """A tap ``cells`` cells away (e.g. a spacing of 1/16 at 24 nodes: 1.5 cells) of a field linear
    in x is that field at x + cells exactly where both interpolation nodes are inside, and zero
    where both are outside (zero padding)."""
    from sciattn.operators.mano_extended import _shift

    t = torch.arange(24, dtype=F64)
    u = (0.3 * t - 2.0).reshape(1, 1, 24)
    for cells in (1.5, -1.5, 2.25, 0.0, -3.0):
        got = _shift(u, 2, cells)[0, 0]
        inside = (t + cells >= 0) & (t + cells <= 23)
        want = torch.where(inside, 0.3 * (t + cells) - 2.0, torch.zeros((), dtype=F64))
        interior = (t + cells >= 1) & (t + cells <= 22)  # both interpolation nodes inside
        torch.testing.assert_close(got[interior], want[interior])
        assert torch.all(got[t + cells >= 24] == 0) and torch.all(got[t + cells <= -1] == 0)  # zero padding


# ------------------------------------------------------------------ relative-position bias
def _bias_oracle(table, window, r):
    """Scalar loops: b_h(δ) at δ = (x_i - x_j) / w by multilinear interpolation on nodes δ_a = m / R."""
    h, d = table.shape[0], len(window)
    cells = list(itertools.product(*[range(w) for w in window]))
    out = torch.zeros(h, len(cells), len(cells), dtype=table.dtype)
    for i, ci in enumerate(cells):
        for j, cj in enumerate(cells):
            pos = [((a - b) / w + 1) * r for a, b, w in zip(ci, cj, window)]  # in [0, 2R]
            low = [min(int(math.floor(p)), 2 * r - 1) for p in pos]
            for corner in itertools.product((0, 1), repeat=d):
                weight = math.prod(p - lo if c else 1 - (p - lo) for p, lo, c in zip(pos, low, corner))
                out[:, i, j] += weight * table[(slice(None),) + tuple(lo + c for lo, c in zip(low, corner))]
    return out


@pytest.mark.parametrize("d,window,r", [(1, (5,), 3), (2, (3, 2), 2), (2, (4, 4), 4), (3, (2, 3, 2), 2)])
def test_relative_bias_matches_scalar_interpolation(d, window, r):
    layer = MultipoleAttention(4, 2, d, window=window, rel_pos_bias=r).double()
    with torch.no_grad():
        layer.rel_bias_table.normal_()
    torch.testing.assert_close(layer.relative_bias(window), _bias_oracle(layer.rel_bias_table.detach(), window, r))


def test_relative_bias_depends_on_the_displacement_in_window_units_only():
    """Training displacements fall on the table's nodes; at twice the resolution (window 2w) the
    bias of a displacement 2Δ equals that of Δ at window w: the same physical kernel."""
    layer = MultipoleAttention(4, 2, 2, window_fraction=0.125, rel_pos_bias=8).double()
    with torch.no_grad():
        layer.rel_bias_table.normal_()
    table = layer.rel_bias_table.detach()
    coarse, fine = layer.relative_bias((8, 8)), layer.relative_bias((16, 16))
    for (a, b), (c, e) in [((0, 0), (7, 7)), ((3, 5), (1, 2)), ((6, 1), (2, 4))]:
        i, j = a * 8 + b, c * 8 + e
        assert coarse[:, i, j].allclose(table[:, a - c + 8, b - e + 8])  # exact node
        fi, fj = (2 * a) * 16 + 2 * b, (2 * c) * 16 + 2 * e
        torch.testing.assert_close(fine[:, fi, fj], coarse[:, i, j])


def test_zero_bias_table_and_the_dense_formula():
    """At initialisation (zero table) the layer equals the unbiased one; with a random table one
    level equals an O(N²) softmax over same-window pairs with the oracle's bias added."""
    torch.manual_seed(3)
    plain = MultipoleAttention(6, 2, 2, window=(3, 2), max_levels=1).double()
    biased = MultipoleAttention(6, 2, 2, window=(3, 2), max_levels=1, rel_pos_bias=2).double()
    biased.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 6, 6, 4, dtype=F64)
    torch.testing.assert_close(biased(x), plain(x))
    with torch.no_grad():
        biased.rel_bias_table.normal_()
        got = biased(x)
    bias = _bias_oracle(biased.rel_bias_table.detach(), (3, 2), 2)
    cells = list(itertools.product(range(6), range(4)))
    tokens = x.flatten(2).transpose(1, 2)  # (B, N, C)
    q, k, v = (t.unflatten(-1, (2, 3)).transpose(1, 2) for t in biased.qkv(tokens).chunk(3, -1))
    s = q @ k.transpose(-1, -2) / math.sqrt(3)
    for i, (a, b) in enumerate(cells):
        for j, (c, e) in enumerate(cells):
            if (a // 3, b // 2) != (c // 3, e // 2):
                s[..., i, j] = -math.inf
            else:
                s[..., i, j] += bias[:, (a % 3) * 2 + b % 2, (c % 3) * 2 + e % 2]
    want = biased.out_proj((torch.softmax(s, -1) @ v).transpose(1, 2).flatten(2)).transpose(1, 2).reshape(x.shape)
    torch.testing.assert_close(got, want)


# ------------------------------------------------------------------ gate, qk-norm, GLU, head
def test_gate_with_a_constant_gate_scales_the_attention_field():
    """With W_g = 0 and bias β the gate is the constant SiLU(β): y - b_o = SiLU(β) (y_plain - b_o)."""
    torch.manual_seed(1)
    plain = MultipoleAttention(6, 3, 2, window=3).double()
    gated = MultipoleAttention(6, 3, 2, window=3, gate=True).double()
    gated.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        gated.gate_proj.weight.zero_()
        gated.gate_proj.bias.fill_(0.7)
    x = torch.randn(1, 6, 9, 7, dtype=F64)
    bo = plain.out_proj.bias.detach().reshape(1, -1, 1, 1)
    scale = torch.nn.functional.silu(torch.tensor(0.7, dtype=F64))
    torch.testing.assert_close(gated(x) - bo, scale * (plain(x) - bo))


def test_qk_norm_scores_are_invariant_to_the_scale_of_queries_and_keys():
    """LayerNorm over the head dimension makes the scores independent of a positive rescaling of
    W_q and W_k, unlike plain attention."""
    torch.manual_seed(2)
    layer = MultipoleAttention(6, 2, 1, window=4, qk_norm=True).double()
    plain = MultipoleAttention(6, 2, 1, window=4).double()
    plain.load_state_dict({k: v for k, v in layer.state_dict().items() if "_norm" not in k})
    layer.q_norm.eps = layer.k_norm.eps = 0.0  # exact invariance (the default eps only bounds 1/std)
    x = torch.randn(2, 6, 16, dtype=F64)
    before, before_plain = layer(x), plain(x)
    with torch.no_grad():
        for m in (layer, plain):
            m.qkv.weight[:12] *= 5.0
            m.qkv.bias[:12] *= 5.0
    torch.testing.assert_close(layer(x), before)
    assert not torch.allclose(plain(x), before_plain, atol=1e-3)


def test_glu_and_mlp_feed_forward_have_about_the_same_parameters():
    count = {f: sum(p.numel() for p in _model(width=24, mlp_ratio=3, ffn=f).blocks[0].ffn.parameters())
             for f in ("mlp", "glu")}
    assert abs(count["glu"] / count["mlp"] - 1) < 0.02


def test_spectral_head_is_resolution_consistent_on_band_limited_fields():
    """One spectral block on a band-limited latent field: the 64-point output sampled every other
    point equals the 32-point output (the Fourier series and the pointwise maps commute with
    sampling)."""
    torch.manual_seed(4)
    head = _model(head="spectral", head_width=6, head_modes=6, head_layers=1, spatial_dims=1, window=4).proj

    def field(n):
        t = torch.arange(n, dtype=torch.float32) / n
        modes = [torch.sin(2 * math.pi * t), torch.cos(4 * math.pi * t), torch.sin(2 * math.pi * t) + 0.3]
        return torch.stack([m * (c + 1) for c in range(16) for m in modes][:16])[None]

    with torch.no_grad():
        coarse, fine = head(field(32)), head(field(64))
    torch.testing.assert_close(fine[..., ::2], coarse, rtol=1e-4, atol=1e-5)
    assert coarse.std() > 1e-3  # a non-trivial output


def test_spectral_head_on_a_fixed_grid_is_exactly_consistent_on_rough_fields():
    """A rough latent field (white noise at 256²) and its 64² restriction: with head_grid=64 the
    256² output at the 64² nodes is the 64² output (the coefficients come from the same 64² samples,
    every other map is pointwise); with the input grid's DFT the two differ (aliasing)."""
    torch.manual_seed(5)
    fixed = _model(head="spectral", head_width=6, head_modes=6, head_layers=2, head_grid=64).proj
    plain = _model(head="spectral", head_width=6, head_modes=6, head_layers=2).proj
    plain.load_state_dict(fixed.state_dict())
    h256 = torch.randn(2, 16, 256, 256)  # float32: neuraloperator's spectral weights are complex64
    h64 = h256[..., ::4, ::4]
    with torch.no_grad():
        want = fixed(h64)
        torch.testing.assert_close(want, plain(h64), rtol=0, atol=0)  # on its own grid: the default head
        torch.testing.assert_close(fixed(h256)[..., ::4, ::4], want, rtol=1e-5, atol=1e-6)
        assert (plain(h256)[..., ::4, ::4] - want).abs().max() > 1e-2
        assert fixed(torch.randn(1, 16, 100, 100)).shape == (1, 1, 100, 100)  # not nested: interpolated
        # off the shared nodes too: on a band-limited field (no aliasing) both heads give the same output
        t = torch.arange(256) / 256
        smooth = torch.stack([torch.sin(2 * math.pi * (c % 3 + 1) * t)[:, None] * torch.cos(2 * math.pi * t)[None]
                              for c in range(16)])[None]
        torch.testing.assert_close(fixed(smooth), plain(smooth), rtol=1e-4, atol=1e-5)




def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="head"):
        _model(head="fourier")
    with pytest.raises(ValueError, match=r"lift_stencil: expected an odd int"):
        _model(lift_stencil=2)
    with pytest.raises(ValueError, match=r"lift_spacing: expected None or a float in \(0, 1\]"):
        _model(lift_stencil=3, lift_spacing=0.0)
    with pytest.raises(ValueError, match="ffn"):
        _model(ffn="swiglu")
    with pytest.raises(ValueError, match=r"head_grid: expected None with head='pointwise'"):
        _model(head_grid=64)
    with pytest.raises(ValueError, match=r"head_grid: expected a positive int"):
        _model(head="spectral", head_grid=0)
    with pytest.raises(ValueError, match=r"head_grid: expected an int or 2 ints \(one per spatial axis\), got \(64, 64, 64\)"):
        _model(head="spectral", head_grid=(64, 64, 64))
    with pytest.raises(ValueError, match=r"rel_pos_bias: expected an int >= 0"):
        MultipoleAttention(4, 2, 2, window=2, rel_pos_bias=-1)
    with pytest.raises(TypeError, match="gate: expected a bool"):
        MultipoleAttention(4, 2, 2, window=2, gate="yes")
    with pytest.raises(TypeError, match="qk_norm: expected a bool"):
        MultipoleAttention(4, 2, 2, window=2, qk_norm=1)
