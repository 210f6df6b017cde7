"""The multipole layer's fused CPU kernels against the previous algorithm and the SDPA path.

* The layer at its default (physical pyramid, tapered windows) equals the frozen copy of the algorithm it
  replaced (``_multipole_oracle.previous_forward``, commit 157823a) to 1e-10 relative in float64, outputs and
  gradients, on square, non-square, odd, 1-D and 3-D grids, with and without quadrature weights.
* ``box_attention`` through each kernel strategy (queries in lanes with key slopes 1, 2 and 4 and query strides
  1 to 4; shared boxes) equals its SDPA path, including keys of weight 0 and queries without an admissible key.
* The custom operators pass ``torch.library.opcheck``; with the kernels switched off the layer takes the SDPA
  path and gives the same outputs; the per-grid geometry is computed once per grid.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from sciattn.multipole import MultipoleAttention, MultipoleSpec, _cpu_extension
from sciattn.multipole import box_attention as ba
from sciattn.multipole.geometry import axis_geometry, clear_geometry_cache, geometry_cache_info
from sciattn.multipole.physical import taper_weights, window_starts
from sciattn.multipole.relative_bias import RelativePositionBias

from ._multipole_oracle import previous_forward

F64 = torch.float64
needs_kernels = pytest.mark.skipif(_cpu_extension.why_not() is not None,
                                   reason=f"CPU kernels unavailable: {_cpu_extension.why_not()}")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def _assert_same_gradients(y: torch.Tensor, yo: torch.Tensor, params: list[torch.Tensor]) -> None:
    """The gradients of ``<y, g>`` and ``<yo, g>`` (one random ``g``) agree to 1e-10 of their size."""
    g = torch.randn_like(y)
    new = torch.autograd.grad((y * g).sum(), params)
    old = torch.autograd.grad((yo * g).sum(), params)
    for a, b in zip(new, old):
        assert (a - b).abs().max() <= 1e-10 * max(b.abs().max().item(), 1.0)


def _layer(d: int, seed: int = 0, **kw) -> MultipoleAttention:
    torch.manual_seed(seed)
    layer = MultipoleAttention(16, 2, d, **kw).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return layer


@needs_kernels
@pytest.mark.parametrize("shape", [(16, 16), (32, 32), (64, 64), (128, 128), (48, 40), (37, 29), (33, 65), (3, 5), (85, 63),
                                   (100,), (257,), pytest.param((12, 10, 9), marks=pytest.mark.slow),
                                   pytest.param((16, 16, 32), marks=pytest.mark.slow)])
@pytest.mark.parametrize("weighted", [False, True])
def test_default_layer_equals_the_previous_algorithm(shape, weighted):
    layer = _layer(len(shape))
    x = torch.randn(2, 16, *shape, dtype=F64, requires_grad=True)
    w = torch.rand(2, *shape, dtype=F64) + 0.2 if weighted else None
    y, yo = layer(x, w), previous_forward(layer, x, w)
    assert _rel(y, yo) <= 1e-10
    with torch.no_grad():  # inference: the kernels add each level into the output in place
        assert _rel(layer(x, w), yo) <= 1e-10
    _assert_same_gradients(y, yo, [x, *layer.parameters()])


@needs_kernels
@pytest.mark.parametrize("kw", [dict(window_taper="none"), dict(gate=True, qk_norm=True), dict(local_window=0),
                                dict(window_fraction=0.25, coarse_cells=4, local_window=5),
                                dict(rel_pos_bias=8, gate=True, qk_norm=True), dict(rel_pos_bias=2, window_taper="none")])
def test_variants_equal_the_previous_algorithm(kw):
    layer = _layer(2, **kw)
    x = torch.randn(2, 16, 40, 48, dtype=F64)
    assert _rel(layer(x), previous_forward(layer, x)) <= 1e-10


@needs_kernels
@pytest.mark.parametrize("shape", [(32, 32), (85, 63), (37, 29), (100,), pytest.param((12, 10, 9), marks=pytest.mark.slow)])
@pytest.mark.parametrize("radius", [1, 8])
def test_layer_with_the_relative_bias_equals_the_previous_algorithm(shape, radius):
    """The bias runs through the kernels (lanes and shared boxes, widened boxes at 85 and 63, no folding): outputs,
    the inference path and every gradient, the table's included, against the frozen SDPA algorithm."""
    layer = _layer(len(shape), rel_pos_bias=radius)
    with torch.no_grad():
        layer.rel_bias_table.normal_()
    x = torch.randn(2, 16, *shape, dtype=F64, requires_grad=True)
    w = torch.rand(2, *shape, dtype=F64) + 0.2
    y, yo = layer(x, w), previous_forward(layer, x, w)
    assert _rel(y, yo) <= 1e-10
    with torch.no_grad():
        assert _rel(layer(x, w), yo) <= 1e-10
    _assert_same_gradients(y, yo, [x, *layer.parameters()])


@needs_kernels
def test_default_layer_at_256_equals_the_previous_algorithm():
    layer = _layer(2)
    x = torch.randn(1, 16, 256, 256, dtype=F64)
    with torch.no_grad():
        assert _rel(layer(x), previous_forward(layer, x)) <= 1e-10


def _cl(t):
    return t.movedim(1, -1).movedim(1, -1)


CASES = [  # (n, m, window, taper): lanes with slopes 1, 2, 4 and strides 1 to 4 (2-D: key rows in a ring); shared boxes
    ((16, 16), (64, 64), (8, 8), True),
    ((64, 32), (64, 64), (8, 8), True),
    ((64, 64), (64, 64), (8, 8), True),
    ((128, 64), (32, 32), (8, 8), True),
    ((48, 40), (64, 64), (8, 8), True),
    ((37, 29), (32, 32), (8, 8), True),
    ((256, 32), (16, 16), (8, 8), True),
    ((20, 20), (8, 8), (8, 8), False),
    ((33, 31), (33, 31), (3, 3), False),
    ((20,), (64,), (8,), True),
    ((12, 10, 9), (16, 16, 16), (8, 8, 8), True),
    ((16, 16), (64, 64), (2, 2), False),  # lanes whose boxes skip key rows and columns (their gradients are zero)
    ((6, 5, 32), (6, 5, 32), (3, 3, 3), False),  # lanes in 3-D (the whole level in the lane layout, no row ring)
]


@needs_kernels
@pytest.mark.parametrize("n, m, window, taper", CASES)
def test_kernels_equal_the_sdpa_path(n, m, window, taper):
    torch.manual_seed(1)
    b, h, d = 2, 2, 16

    def make(*shape):
        return torch.randn(*shape, dtype=F64, requires_grad=True)

    q, k, v = make(b, h, d, *n), make(b, h, d, *m), make(b, h, d, *m)
    logw = torch.rand(b, *m, dtype=F64).log()
    logw.view(-1)[::7] = -math.inf  # keys of weight 0
    logw.requires_grad_()
    out = ba.box_attention(q, k, v, logw, window, 0.25, taper=taper, backend="cpu")
    ref = ba.box_attention(q, k, v, logw, window, 0.25, taper=taper, backend="sdpa")
    assert _rel(out, ref) <= 1e-13
    g = torch.randn_like(ref)
    got = torch.autograd.grad((out * g).sum(), (q, k, v, logw))
    want = torch.autograd.grad((ref * g).sum(), (q, k, v, logw))
    for a, w in zip(got, want):
        assert (a - w).abs().max() <= 1e-12 * max(w.abs().max().item(), 1.0)


@needs_kernels
@pytest.mark.parametrize("n, m, window, taper", CASES)
@pytest.mark.parametrize("radius", [2, 8])
def test_kernels_with_the_relative_bias_equal_the_sdpa_path(n, m, window, taper, radius):
    torch.manual_seed(4)
    b, h, d = 2, 2, 8

    def make(*shape):
        return torch.randn(*shape, dtype=F64, requires_grad=True)

    q, k, v = make(b, h, d, *n), make(b, h, d, *m), make(b, h, d, *m)
    table = make(h, *(2 * radius + 1,) * len(n))
    logw = torch.rand(b, *m, dtype=F64).log()
    logw.view(-1)[::7] = -math.inf
    logw.requires_grad_()
    bias = RelativePositionBias(table, radius)
    out = ba.box_attention(q, k, v, logw, window, 0.25, bias, taper=taper, backend="cpu")
    ref = ba.box_attention(q, k, v, logw, window, 0.25, bias, taper=taper, backend="sdpa")
    assert _rel(out, ref) <= 1e-13
    g = torch.randn_like(ref)
    got = torch.autograd.grad((out * g).sum(), (q, k, v, logw, table))
    want = torch.autograd.grad((ref * g).sum(), (q, k, v, logw, table))
    for a, w in zip(got, want):
        assert (a - w).abs().max() <= 1e-12 * max(w.abs().max().item(), 1.0)
    acc = torch.randn(ref.shape, dtype=F64)  # the inference path adds gamma_h A into acc (contiguous) in place
    gamma = torch.rand(h, dtype=F64)
    expect = acc + gamma.view(h, 1, *(1,) * len(n)) * ref.detach()
    with torch.no_grad():
        assert ba.accumulate_box_attention(acc, gamma, q, k, v, logw, window, 0.25, taper, bias=bias)
    assert _rel(acc, expect) <= 1e-13


@needs_kernels
def test_the_bias_kernels_check_their_tables():
    n3, m3, starts, logphi, (a, r), upos = ba._geometry((20, 32), (8, 8), (8, 8), True, F64, "cpu", None, 2)
    q = torch.randn(1, 2, 8, 640, dtype=F64)
    k = torch.randn(1, 2, 8, 64, dtype=F64)
    logw = torch.zeros(1, 64, dtype=F64)
    table = torch.randn(2, 1, 5, 5, dtype=F64)
    with pytest.raises(RuntimeError, match="node positions outside the table"):
        ba._box_forward(q, k, k, logw, n3, m3, starts, logphi, 0.3, a, r, table[..., :3, :3].contiguous(), upos)
    with pytest.raises(RuntimeError, match="bias table"):
        ba._box_forward(q, k, k, logw, n3, m3, starts, logphi, 0.3, a, r, table[:1], upos)
    bias = RelativePositionBias(torch.randn(3, 5, 5, dtype=F64), 2)
    with pytest.raises(ValueError, match="bias: expected a table of 2 heads"):
        ba.box_attention(q.view(1, 2, 8, 20, 32), k.view(1, 2, 8, 8, 8), k.view(1, 2, 8, 8, 8), logw.view(1, 8, 8),
                         (8, 8), 0.3, bias, backend="cpu")
    with pytest.raises(ValueError, match="radius: expected an int >= 1"):
        RelativePositionBias(table, 0)
    with pytest.raises(ValueError, match="key_grid: a folded level takes no score bias"):
        ba.box_attention(torch.randn(1, 2, 8, 16, 16, dtype=F64), torch.randn(1, 2, 8, 16, 16, dtype=F64),
                         torch.randn(1, 2, 8, 16, 16, dtype=F64), torch.zeros(1, 16, 16, dtype=F64), (8, 8), 0.3,
                         RelativePositionBias(torch.randn(2, 5, 5, dtype=F64), 2), key_grid=(32, 32))


@needs_kernels
@pytest.mark.parametrize("n, m", [((64, 64), (64, 64)), ((64, 64), (8, 8))])
def test_a_query_without_admissible_keys_gets_zero(n, m):
    q, k, v = torch.randn(1, 2, 8, *n), torch.randn(1, 2, 8, *m), torch.randn(1, 2, 8, *m)
    logw = torch.full((1, *m), -math.inf)
    out = ba.box_attention(q, k, v, logw, (8, 8), 0.3, taper=True, backend="cpu")
    assert torch.equal(out, torch.zeros_like(out))


@needs_kernels
@pytest.mark.parametrize("biased", [False, True])
def test_float32_kernels_agree_with_sdpa_to_rounding(biased):
    torch.manual_seed(2)
    q, k, v = torch.randn(1, 4, 16, 96, 96), torch.randn(1, 4, 16, 32, 32), torch.randn(1, 4, 16, 32, 32)
    logw = torch.rand(1, 32, 32).log()
    bias = RelativePositionBias(torch.randn(4, 17, 17), 8) if biased else None
    out = ba.box_attention(q, k, v, logw, (8, 8), 0.25, bias, backend="cpu")
    ref = ba.box_attention(q, k, v, logw, (8, 8), 0.25, bias, backend="sdpa")
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-6)


@needs_kernels
@pytest.mark.parametrize("a, r, n, m", [(1, 1, (20, 32), (20, 32)), (0, 0, (20, 32), (8, 8)), (2, 1, (10, 16), (20, 32))])
def test_opcheck(a, r, n, m):
    torch.manual_seed(3)
    window = (3, 3) if n == m else (8, 8)
    n3, m3, starts, logphi, _, _ = ba._geometry(n, m, window, n != m, F64, "cpu")
    q = torch.randn(1, 2, 8, math.prod(n), dtype=F64, requires_grad=True)
    k = torch.randn(1, 2, 8, math.prod(m), dtype=F64, requires_grad=True)
    v = torch.randn(1, 2, 8, math.prod(m), dtype=F64, requires_grad=True)
    logw = torch.rand(1, math.prod(m), dtype=F64).log().requires_grad_()
    torch.library.opcheck(ba._box_forward, (q, k, v, logw, n3, m3, starts, logphi, 0.35, a, r, None, []))
    n3, m3, starts, logphi, _, upos = ba._geometry(n, m, window, n != m, F64, "cpu", None, 2)
    table = torch.randn(2, 1, 5, 5, dtype=F64, requires_grad=True)
    torch.library.opcheck(ba._box_forward, (q, k, v, logw, n3, m3, starts, logphi, 0.35, a, r, table, upos))


@needs_kernels
def test_without_the_kernels_the_layer_takes_the_sdpa_path(monkeypatch):
    layer = _layer(2)
    x = torch.randn(1, 16, 40, 40, dtype=F64)
    fast = layer(x)
    assert ba.box_attention_backend(x.new_empty(1, 2, 8, 4))[0] == "cpu"
    monkeypatch.setenv(_cpu_extension.ENV_SWITCH, "0")
    backend, why = ba.box_attention_backend(x.new_empty(1, 2, 8, 4))
    assert backend == "sdpa" and _cpu_extension.ENV_SWITCH in why
    assert _rel(layer(x), fast) <= 1e-12


@pytest.mark.skipif(_cpu_extension.fcntl is None, reason="flock is POSIX")
def test_a_build_killed_part_way_leaves_no_lock_that_blocks_the_next(tmp_path):
    """PyTorch's build marker left by a killed build is removed under the build lock; while one process holds the
    lock another cannot take it, and the lock dies with its holder."""
    import subprocess
    import sys

    directory = tmp_path / "py311_cpu" / "sciattn_box_test"
    directory.mkdir(parents=True)
    (directory / "lock").touch()  # what a build killed between its start and its link leaves behind
    with _cpu_extension.build_lock(directory):
        assert not (directory / "lock").exists()
        probe = ("import fcntl, sys; f = open(sys.argv[1], 'a+')\n"
                 "try:\n    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
                 "except BlockingIOError:\n    print('held')")
        flock = str(directory.with_name(directory.name + ".flock"))
        assert subprocess.run([sys.executable, "-c", probe, flock], capture_output=True, text=True).stdout.strip() == "held"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
                               "fcntl.flock(f.fileno(), fcntl.LOCK_EX); print('got', flush=True); time.sleep(60)", flock],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "got"
    holder.kill()
    holder.wait()
    with _cpu_extension.build_lock(directory):  # a dead holder's lock is released by the system
        pass


def test_backend_reasons_name_what_rules_the_kernels_out():
    q = torch.zeros(1, 2, 8, 4)
    assert "bias" in ba.box_attention_backend(q, bias=lambda d: 0)[1]
    assert "dtype" in ba.box_attention_backend(q.half())[1]
    assert "head dimension" in ba.box_attention_backend(torch.zeros(1, 2, 80, 4))[1]
    with pytest.raises(ValueError, match="backend: expected one of"):
        ba.box_attention(q.view(1, 2, 8, 2, 2), q.view(1, 2, 8, 2, 2), q.view(1, 2, 8, 2, 2), torch.zeros(1, 2, 2),
                         (2, 2), 1.0, backend="triton")


def test_lane_strides_rule():
    assert ba.lane_strides(512, 512, 3) == (1, 1)  # local term
    assert ba.lane_strides(256, 64, 9) == (1, 4)  # four input cells per key cell
    assert ba.lane_strides(512, 64, 9) == (0, 0)  # eight: shared boxes
    assert ba.lane_strides(32, 64, 9) == (2, 1)  # finer key grid, slope 2
    assert ba.lane_strides(48, 64, 9) == (4, 3)
    assert ba.lane_strides(512, 8, 8) == (0, 0)  # the global level
    assert ba.lane_strides(37, 32, 9) == (0, 0)  # no lane structure


@pytest.mark.parametrize("n, m, c", [(16, 64, 8), (64, 64, 8), (256, 64, 8), (37, 32, 8), (100, 16, 8)])
def test_axis_geometry_matches_the_taper_weights(n, m, c):
    g = axis_geometry(n, m, c, True)
    xq = (torch.arange(n, dtype=F64) + 0.5) * m / n
    keys = g.start[:, None] + torch.arange(g.length)
    phi = taper_weights(xq[:, None], keys, m, c)[:, 0]  # (n, L): each query with its own box
    torch.testing.assert_close(g.logphi.exp(), phi, rtol=0, atol=1e-15)
    full = torch.zeros(n, m, dtype=F64).scatter(1, keys, phi)  # every window weight lies in the box
    assert torch.allclose(full.sum(1), torch.full((n,), float(c), dtype=F64)) or m <= c
    hard = axis_geometry(n, m, c, False)
    cell = xq.floor().clamp(0, m - 1).long()
    assert torch.equal(hard.start, window_starts(m, c)[cell]) and hard.length == c


def test_geometry_is_computed_once_per_grid():
    clear_geometry_cache()
    layer = MultipoleAttention(8, 2, 2)
    x = torch.randn(1, 8, 24, 24)
    with torch.no_grad():
        layer(x)
        misses = geometry_cache_info()["float64"].misses
        layer(x)
    assert geometry_cache_info()["float64"].misses == misses


def test_spec_holds_every_default_once():
    spec = MultipoleSpec.resolve(2)
    assert spec.window_fraction == (0.125, 0.125) and spec.coarse_cells == (8, 8) and spec.local_window == (3, 3)
    assert spec.window_taper == "linear" and [m for m, _ in spec.levels] == [(64, 64), (32, 32), (16, 16), (8, 8)]
    assert MultipoleSpec.resolve(2, **spec.layer_arguments()) == spec
    assert MultipoleSpec.for_operator(2, window=8).pyramid == "input"
    fr = MultipoleSpec.for_operator(2, pyramid="input", window_fraction=0.125, coarse_cells=8, local_window=3)
    assert fr.pyramid == "input" and fr.local_window is None and fr.window_taper == "none"
    layer = MultipoleAttention(8, 2, 2, spec=spec)
    assert layer.spec is spec and layer.window_fraction == spec.window_fraction
    with pytest.raises(ValueError, match="spec: expected a spec for spatial_dims=3"):
        MultipoleAttention(8, 2, 3, spec=spec)


@pytest.mark.parametrize("kwargs, match", [
    (dict(window=8, pyramid="physical"), "window: expected None with pyramid='physical'"),
    (dict(window_fraction=1.5), r"window_fraction: expected a float or 2 floats in \(0, 1\]"),
    (dict(pyramid="input", local_window=3), "local_window: expected None or 0 with pyramid='input'"),
    (dict(pyramid="input", window_taper="linear"), "window_taper: expected None or 'none'"),
    (dict(window=8, coarse_cells=8), "coarse_cells: expected None unless window_fraction is given"),
    (dict(pool_factor=1), "pool_factor: expected an int >= 2"),
])
def test_spec_errors_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultipoleSpec.resolve(2, **kwargs)


@needs_kernels
@pytest.mark.parametrize("n, m, window, taper", [CASES[0], CASES[3], CASES[5], CASES[7], CASES[8], CASES[9]])
def test_flex_path_equals_the_kernels(n, m, window, taper):
    """The GPU path (flex attention; eager and unfused on the CPU, forward only there) against the fused CPU
    kernels, float64. Its gradients are checked on a GPU (benchmarks/gpu_check.sh)."""
    from sciattn._capabilities import has_flex_attention

    if not has_flex_attention():
        pytest.skip("flex attention is not available")
    torch.manual_seed(4)
    q, k, v = torch.randn(1, 2, 8, *n, dtype=F64), torch.randn(1, 2, 8, *m, dtype=F64), torch.randn(1, 2, 8, *m, dtype=F64)
    logw = torch.rand(1, *m, dtype=F64).log()
    logw.view(-1)[::5] = -math.inf
    with warnings.catch_warnings():  # eager flex on the CPU warns that it is unfused: it is the test's point
        warnings.simplefilter("ignore", UserWarning)
        out = ba.box_attention(q, k, v, logw, window, 0.3, taper=taper, backend="flex")
    ref = ba.box_attention(q, k, v, logw, window, 0.3, taper=taper, backend="cpu")
    assert _rel(out, ref) <= 1e-12


def test_flex_on_the_cpu_refuses_gradients():
    q = torch.zeros(1, 2, 8, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match="backend: 'flex' has no backward on the CPU"):
        ba.box_attention(q, q, q, torch.zeros(1, 4, 4), (2, 2), 1.0, backend="flex")


def test_flex_refuses_a_score_bias():
    q = torch.zeros(1, 2, 8, 4, 4)
    with pytest.raises(ValueError, match="backend: 'flex' takes no score bias"):
        ba.box_attention(q, q, q, torch.zeros(1, 4, 4), (2, 2), 1.0, bias=lambda d: 0, backend="flex")


FOLD_CASES = [  # (n, level grid, window, taper): integer and non-integer ratios, one or all axes finer than n
    ((32, 32), (64, 64), (8, 8), True),
    ((16, 16), (64, 64), (8, 8), True),
    ((40, 48), (64, 64), (8, 8), True),
    ((37, 29), (64, 64), (8, 8), False),
    ((32, 128), (64, 64), (8, 8), True),
    ((20,), (64,), (8,), True),
    ((5, 6, 7), (16, 16, 16), (8, 8, 8), True),
]


@needs_kernels
@pytest.mark.parametrize("n, m, window, taper", FOLD_CASES)
def test_a_level_finer_than_the_input_folded_onto_it_equals_the_level(n, m, window, taper):
    """The level on its own (finer) grid, keys pooled there from the input (SDPA path), against the CPU kernels
    on the input-grid keys with the folded window weights: values and gradients (the input-grid key gradients
    are the sums the pooling's backward forms)."""
    from sciattn.multipole.physical import pool_to_grid

    torch.manual_seed(3)
    b, h, d = 2, 2, 8
    folded = tuple(min(a, c) for a, c in zip(m, n))
    x = torch.randn(b, 2 * h * d, *n, dtype=F64, requires_grad=True)
    q = torch.randn(b, h, d, *n, dtype=F64, requires_grad=True)
    w = torch.rand(b, *n, dtype=F64) + 0.1
    w.view(-1)[::5] = 0.0  # cells of weight 0

    def level(grid, backend, key_grid=None):
        xm, wm = pool_to_grid(x, w, grid)
        k, v = xm.view(b, 2, h, d, *grid).unbind(1)
        logw = torch.where(wm > 0, wm.log(), torch.full((), -math.inf, dtype=F64))
        return ba.box_attention(q, k, v, logw, window, 0.3, taper=taper, backend=backend, key_grid=key_grid)

    ref, out = level(m, "sdpa"), level(folded, "cpu", key_grid=m)
    assert _rel(out, ref) <= 1e-12
    g = torch.randn_like(ref)
    for a, r in zip(torch.autograd.grad((out * g).sum(), (q, x)), torch.autograd.grad((ref * g).sum(), (q, x))):
        assert (a - r).abs().max() <= 1e-12 * max(r.abs().max().item(), 1.0)
    with torch.no_grad():  # the inference path adds the folded level in place
        acc = torch.zeros(ref.shape, dtype=F64)
        xm, wm = pool_to_grid(x, w, folded)
        k, v = xm.view(b, 2, h, d, *folded).unbind(1)
        assert ba.accumulate_box_attention(acc, torch.ones(h, dtype=F64), q, k, v, wm.log(), window, 0.3, taper,
                                           key_grid=m)
        assert _rel(acc, ref) <= 1e-12


def test_the_folded_weights_keep_every_window_weight():
    """Φ sums φ / share over the key cells of each input cell: the row sums are those of φ / share, and the
    fold of a level on the input's own grid is refused."""
    from sciattn.multipole.geometry import folded_axis_geometry

    for n, m, c in [(32, 64, 8), (16, 64, 8), (40, 64, 8), (37, 64, 8)]:
        g, f = axis_geometry(n, m, c, True), folded_axis_geometry(n, m, c, True)
        src = torch.div((2 * torch.arange(m) + 1) * n, 2 * m, rounding_mode="floor")
        share = torch.bincount(src, minlength=n).to(F64)
        keys = g.start[:, None] + torch.arange(g.length)
        want = (g.logphi.exp() / share[src[keys]]).sum(1)
        torch.testing.assert_close(f.logphi.exp().sum(1), want, rtol=1e-14, atol=0)
        assert f.length < g.length and int((f.start + f.length).max()) <= n and int(f.start.min()) >= 0
    with pytest.raises(ValueError, match="expected 1 <= n < m"):
        folded_axis_geometry(64, 64, 8, True)


@needs_kernels
def test_key_grid_errors_name_the_argument():
    q = torch.zeros(1, 2, 8, 16, 16)
    k = torch.zeros(1, 2, 8, 16, 16)
    with pytest.raises(ValueError, match="key_grid: a folded level runs through the CPU kernels only"):
        ba.box_attention(q, k, k, torch.zeros(1, 16, 16), (8, 8), 1.0, backend="sdpa", key_grid=(64, 64))
    with pytest.raises(ValueError, match=r"key_grid: expected 2 ints"):
        ba.box_attention(q, k, k, torch.zeros(1, 16, 16), (8, 8), 1.0, key_grid=(64,))
    with pytest.raises(ValueError, match=r"key_grid: expected, per axis"):
        ba.box_attention(q, k[..., :8, :8], k[..., :8, :8], torch.zeros(1, 8, 8), (8, 8), 1.0, key_grid=(64, 64))


@needs_kernels
def test_the_layer_folds_levels_finer_than_the_input(monkeypatch):
    """At 32² the default's 64-cell level runs on the input grid (key_grid=(64, 64)); on the SDPA path it does
    not fold, and both give the same output."""
    import sciattn.multipole.module as module

    calls = []
    real = module.box_attention

    def spy(q, k, v, *args, key_grid=None, **kw):
        calls.append((tuple(k.shape[3:]), key_grid))
        return real(q, k, v, *args, key_grid=key_grid, **kw)

    monkeypatch.setattr(module, "box_attention", spy)
    layer = _layer(2)
    x = torch.randn(1, 16, 32, 32, dtype=F64, requires_grad=True)
    y = layer(x)
    assert calls[0] == ((32, 32), (64, 64)) and calls[1] == ((32, 32), None)
    calls.clear()
    layer.backend = "sdpa"
    assert _rel(layer(x), y) <= 1e-12 and calls[0] == ((64, 64), None)
