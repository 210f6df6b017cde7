"""The dtype and NaN policy of issue 23 (``sciattn._checks``), table-driven over every functional and layer.

- Functionals: floating ``q``, ``k``, ``v`` of one dtype; weights/positions floating of any precision;
  an integer/bool tensor is a ``TypeError`` naming the argument.
- Layers: inputs in the parameters' dtype, else ``TypeError`` naming the argument and both dtypes
  (integer/bool inputs too).
- Layers: NaN at a real point is a ``ValueError`` naming the argument and the first index.
"""

from __future__ import annotations

import pytest
import torch

from sciattn import (
    BallAttention,
    CodomainAttention,
    GalerkinAttention,
    SphericalAttention,
    SphericalNeighborhoodAttention,
    ball_attention,
    codomain_attention,
    galerkin_attention,
    neighborhood_attention,
    weighted_softmax_attention,
)
from sciattn.multipole import MultipoleAttention
from sciattn.multipole.functional import window_attention
from sciattn.neighborhood import csr_from_pairs
from sciattn.spherical.functional import spherical_attention, spherical_neighborhood_attention

B, H, N, D = 2, 1, 8, 4


def _full_csr(n=N):
    rows, cols = torch.ones(n, n, dtype=torch.bool).nonzero(as_tuple=True)
    return csr_from_pairs(rows, cols, n)


def _pos(dtype=torch.float32):
    return torch.rand(B, N, 2).to(dtype)


# functional(q, k, v, **aux) with q, k, v (B, H, N, D) except where the layout differs
def _codomain(q, k, v, **kw):
    return codomain_attention(q.unsqueeze(2), k.unsqueeze(2), v.unsqueeze(2), **kw)


def _sphere(fn):
    def call(q, k, v, **kw):
        f = lambda t: t.transpose(-1, -2).reshape(B, H * D, 2, 4)  # noqa: E731
        return fn(f(q), f(k), f(v), n_heads=H, **kw)
    return call


FUNCTIONALS = {
    "galerkin": (lambda q, k, v, **kw: galerkin_attention(q, k, v, **kw), "weights"),
    "weighted_softmax": (lambda q, k, v, **kw: weighted_softmax_attention(q, k, v, **kw), "weights"),
    "neighborhood": (lambda q, k, v, **kw: neighborhood_attention(q, k, v, *_full_csr(), **kw), "weights"),
    "window": (lambda q, k, v, **kw: window_attention(q, k, v, 4, **kw), "weights"),
    "codomain": (_codomain, "weights"),
    "ball": (lambda q, k, v, pos=None, **kw: ball_attention(q, k, v, _pos() if pos is None else pos, 4, **kw), "pos"),
    "spherical": (_sphere(spherical_attention), None),
    "spherical_neighborhood": (_sphere(spherical_neighborhood_attention), None),
}


def _qkv(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, N, D, generator=g).to(dtype) for _ in range(3)]


@pytest.mark.parametrize("fn", list(FUNCTIONALS))
@pytest.mark.parametrize("which", [1, 2])
def test_functional_k_or_v_of_another_float_dtype_is_a_type_error(fn, which):
    t = _qkv()
    t[which] = t[which].double()
    name = "kv"[which - 1]
    with pytest.raises(TypeError) as err:
        FUNCTIONALS[fn][0](*t)
    msg = str(err.value)
    assert msg.startswith(f"{name}: expected dtype torch.float32 (the dtype of q"), msg
    assert "got torch.float64" in msg, msg


@pytest.mark.parametrize("fn", list(FUNCTIONALS))
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_functional_integer_or_bool_q_is_a_type_error(fn, dtype):
    t = [x.to(dtype) for x in _qkv()]
    with pytest.raises(TypeError) as err:
        FUNCTIONALS[fn][0](*t)
    msg = str(err.value)
    assert msg.startswith("q: expected a floating-point tensor"), msg
    assert f"got dtype {dtype}" in msg, msg


def test_integer_galerkin_no_longer_returns_zeros():
    q = torch.ones(B, H, N, D, dtype=torch.int64)
    with pytest.raises(TypeError, match="q: expected a floating-point tensor"):
        galerkin_attention(q, q, q)


@pytest.mark.parametrize("fn", [f for f, (_, aux) in FUNCTIONALS.items() if aux])
def test_functional_integer_weights_or_positions_are_a_type_error(fn):
    call, aux = FUNCTIONALS[fn]
    bad = torch.ones(B, N, dtype=torch.int64) if aux == "weights" else torch.ones(B, N, 2, dtype=torch.int64)
    with pytest.raises(TypeError) as err:
        call(*_qkv(), **{aux: bad})
    msg = str(err.value)
    assert msg.startswith(f"{aux}: expected a floating-point tensor"), msg
    assert "torch.int64" in msg, msg


@pytest.mark.parametrize("fn", [f for f, (_, aux) in FUNCTIONALS.items() if aux])
def test_functional_float64_weights_or_positions_with_float32_qkv_are_accepted(fn):
    call, aux = FUNCTIONALS[fn]
    extra = torch.rand(B, N, dtype=torch.float64) + 0.5 if aux == "weights" else _pos(torch.float64)
    out = call(*_qkv(), **{aux: extra})
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


# ------------------------------------------------------------------ layers: (module, make inputs, real-mask)
def _grid(c, *n):
    return torch.randn(B, c, *n)


LAYERS = {
    "GalerkinAttention": (lambda: GalerkinAttention(8, 2), lambda: {"x": torch.randn(B, N, 8)}),
    "MultipoleAttention": (lambda: MultipoleAttention(8, 2, window=4), lambda: {"x": _grid(8, 8, 8)}),
    "CodomainAttention": (lambda: CodomainAttention(4, 1, qkv="pointwise"), lambda: {"x": torch.randn(B, 2, 4, 6, 6)}),
    "BallAttention": (lambda: BallAttention(8, 2, spatial_dims=2, ball_size=4),
                      lambda: {"x": torch.randn(B, N, 8), "pos": torch.rand(B, N, 2)}),
    "SphericalAttention": (lambda: SphericalAttention(4, 1, (4, 8)), lambda: {"query": _grid(4, 4, 8)}),
    "SphericalNeighborhoodAttention": (lambda: SphericalNeighborhoodAttention(4, 1, (4, 8)),
                                       lambda: {"query": _grid(4, 4, 8)}),
}


def _first(inputs):
    return next(iter(inputs))


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_runs_on_its_own_dtype(layer):
    make, inputs = LAYERS[layer]
    assert torch.isfinite(make()(**inputs())).all()
    assert make().double()(**{k: v.double() for k, v in inputs().items()}).dtype == torch.float64


def _error_on_first_input(layer, change, exc):
    """Run ``layer`` (a key of ``LAYERS``, float32) on its inputs with the first one replaced by ``change(first)``, which
    must raise ``exc``: returns the first input's name, the error message and the changed input."""
    make, inputs = LAYERS[layer]
    kw = inputs()
    name = _first(kw)
    kw[name] = change(kw[name])
    with pytest.raises(exc) as err:
        make()(**kw)
    return name, str(err.value), kw[name]


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_float64_input_to_float32_layer_is_a_type_error(layer):
    name, msg, _ = _error_on_first_input(layer, lambda x: x.double(), TypeError)
    assert msg.startswith(f"{name}: expected dtype torch.float32 (the layer's parameters), got torch.float64"), msg
    assert "cast the input with .to(torch.float32)" in msg, msg


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_integer_input_is_a_type_error(layer):
    name, msg, _ = _error_on_first_input(layer, lambda x: x.to(torch.int64), TypeError)
    assert msg.startswith(f"{name}: expected a floating-point tensor of dtype torch.float32"), msg
    assert "got torch.int64" in msg, msg


def _first_entry_of_second_sample(x):
    return (1,) + (0,) * (x.dim() - 1)


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_nan_at_a_real_point_is_a_value_error_with_the_index(layer):
    def poison(x):
        x[_first_entry_of_second_sample(x)] = float("nan")
        return x

    name, msg, x = _error_on_first_input(layer, poison, ValueError)
    assert msg.startswith(f"{name}: expected finite values, got 1 NaN"), msg
    assert f"the first at index {_first_entry_of_second_sample(x)}" in msg, msg


def test_nan_at_padded_points_is_still_ignored():
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, -2:] = False
    x = torch.randn(B, N, 8)
    x[0, -1] = float("nan")
    assert torch.isfinite(GalerkinAttention(8, 2)(x, mask=mask)[mask]).all()
    pos = torch.rand(B, N, 2)
    assert torch.isfinite(BallAttention(8, 2, spatial_dims=2, ball_size=4)(x, pos, mask=mask)[mask]).all()
    xv = torch.randn(B, 2, 4, 6, 6)
    xv[0, 1] = float("nan")
    var_mask = torch.tensor([[True, False], [True, True]])
    assert torch.isfinite(CodomainAttention(4, 1, qkv="pointwise")(xv, var_mask=var_mask)).all()


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_layer_nan_check_is_skipped_while_tracing():
    layer = GalerkinAttention(8, 2)
    traced = torch.jit.trace(layer, (torch.randn(B, N, 8),), check_trace=False)
    x = torch.randn(B, N, 8)
    x[0, 0, 0] = float("nan")
    assert torch.isnan(traced(x)).any()  # no value check in the traced graph
