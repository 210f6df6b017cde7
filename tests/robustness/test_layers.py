"""Robustness of the attention layers (issue 23): bad hyperparameters at construction (non-positive
sizes, bools for ints, unknown choices, heads that do not divide the width) and bad inputs to
``forward`` (wrong ranks, channel counts, grids, masks, weights, unknown backends)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from sciattn import (
    BackendError,
    BallAttention,
    CodomainAttention,
    GalerkinAttention,
    SphericalAttention,
    SphericalNeighborhoodAttention,
)
from sciattn.multipole import MultipoleAttention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cases import Case, parametrize, run_case  # noqa: E402


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def build(layer: str, id: str, make, exc, words, one_line: bool = True) -> Case:
    """A constructor case: ``make()`` builds the layer with one bad hyperparameter."""
    return Case("layers", f"{layer}-init-{id}", make, exc, words, one_line)


def fwd(layer: str, id: str, make, call, exc, words, one_line: bool = True) -> Case:
    """A forward case: ``call(make())`` runs a valid layer on one bad input. A forced-Triton case pins Triton's
    interpreter off (with TRITON_INTERPRET=1 the kernel would run on CPU instead of being refused)."""
    env = {"TRITON_INTERPRET": None} if "triton" in id else {}
    return Case("layers", f"{layer}-forward-{id}", lambda: call(make()), exc, words, one_line, env)


def galerkin(**kw):
    return GalerkinAttention(8, 2, **kw)


def multipole(**kw):
    return MultipoleAttention(8, 2, 2, **{"window": 2, **kw})


def codomain(**kw):
    return CodomainAttention(4, 1, 2, **{"n_modes": 2, **kw})


def ball(**kw):
    return BallAttention(8, 2, 3, 4, **kw)


def sph(**kw):
    return SphericalAttention(4, 2, (4, 8), **kw)


def sph_nbhd(**kw):
    return SphericalNeighborhoodAttention(4, 2, (4, 8), **kw)


POSITIVE = ("expected a positive int",)

CASES: list[Case] = [
    # GalerkinAttention
    build("galerkin", "d-model-zero", lambda: GalerkinAttention(0, 2), ValueError, ("d_model", *POSITIVE, "got 0")),
    build("galerkin", "d-model-bool", lambda: GalerkinAttention(True, 1), TypeError, ("d_model", *POSITIVE, "bool")),
    build("galerkin", "d-model-float", lambda: GalerkinAttention(8.0, 2), TypeError, ("d_model", *POSITIVE, "float")),
    build("galerkin", "n-heads-negative", lambda: GalerkinAttention(8, -2), ValueError, ("n_heads", *POSITIVE, "-2")),
    build("galerkin", "n-heads-not-divisor", lambda: GalerkinAttention(8, 3), ValueError, ("n_heads", "8")),
    build("galerkin", "attention-type-unknown", lambda: galerkin(attention_type="linear"), ValueError,
          ("attention_type: expected one of ['fourier', 'galerkin'], got 'linear'",)),
    build("galerkin", "pos-dim-negative", lambda: galerkin(pos_dim=-1), ValueError, ("pos_dim", "-1")),
    build("galerkin", "dropout-above-one", lambda: galerkin(dropout=1.5), ValueError, ("dropout", "1.5")),
    fwd("galerkin", "x-rank", galerkin, lambda m: m(_r(2, 8)), ValueError, ("x: expected a 3-D tensor", "(2, 8)")),
    fwd("galerkin", "x-channels", galerkin, lambda m: m(_r(2, 5, 6)), ValueError,
        ("x: expected size 8 along axis -1 (d_model), got 6",)),
    fwd("galerkin", "x-not-tensor", galerkin, lambda m: m([[0.0] * 8]), TypeError, ("x: expected a torch.Tensor",)),
    fwd("galerkin", "mask-wrong-shape", galerkin,
        lambda m: m(_r(2, 5, 8), mask=torch.ones(2, 4, dtype=torch.bool)), ValueError, ("mask: expected a bool tensor of shape (2, 5) (B, Nk)", "got torch.bool (2, 4)")),
    fwd("galerkin", "mask-all-false", galerkin, lambda m: m(_r(2, 5, 8), mask=torch.zeros(2, 5, dtype=torch.bool)),
        ValueError, ("mask: expected at least one True entry", "sample 0")),
    fwd("galerkin", "weights-negative", galerkin, lambda m: m(_r(2, 5, 8), weights=-torch.ones(5)), ValueError,
        ("weights: expected non-negative finite values", "got -1.0")),
    fwd("galerkin", "weights-inf", galerkin,
        lambda m: m(_r(2, 5, 8), weights=torch.tensor([1, 1, float("inf"), 1, 1])), ValueError,
        ("weights: expected non-negative finite values", "got inf")),
    fwd("galerkin", "weights-wrong-n", galerkin, lambda m: m(_r(2, 5, 8), weights=torch.ones(4)), ValueError,
        ("weights: expected shape",)),
    fwd("galerkin", "pos-wrong-n", lambda: galerkin(pos_dim=2), lambda m: m(_r(2, 5, 8), _r(2, 4, 2)), ValueError,
        ("pos: expected shape (B, 5, 2), got (2, 4, 2)",)),
    fwd("galerkin", "context-rank", galerkin, lambda m: m(_r(2, 5, 8), context=_r(5, 8)), ValueError,
        ("context: expected a 3-D tensor",)),
    fwd("galerkin", "backend-unknown", lambda: galerkin(backend="cuda-magic"), lambda m: m(_r(2, 5, 8)),
        BackendError, ("backend: expected one of", "got 'cuda-magic'")),
    fwd("galerkin", "backend-triton-on-cpu", lambda: galerkin(backend="triton"), lambda m: m(_r(2, 5, 8)),
        BackendError, ("backend 'triton'", "galerkin"), one_line=False),
    build("galerkin", "norm-eps-zero", lambda: galerkin(norm_eps=0.0), ValueError,
          ("norm_eps: expected a positive finite float, got 0.0",)),
    build("galerkin", "norm-eps-str", lambda: galerkin(norm_eps="1e-5"), TypeError, ("norm_eps", "str")),
    build("galerkin", "backend-unknown", lambda: galerkin(backend="nope"), ValueError,
          ("backend: expected one of", "for op 'galerkin', got 'nope'")),
    fwd("galerkin", "pos-without-pos-dim", galerkin, lambda m: m(_r(2, 5, 8), _r(2, 5, 2)), ValueError,
        ("pos: the layer was built with pos_dim=0", "build it with pos_dim=d or pass pos=None")),
    fwd("galerkin", "context-pos-without-pos-dim", galerkin,
        lambda m: m(_r(2, 5, 8), context=_r(2, 3, 8), context_pos=_r(2, 3, 2)), ValueError,
        ("context_pos: the layer was built with pos_dim=0", "pass context_pos=None")),
    # MultipoleAttention
    build("multipole", "dim-zero", lambda: MultipoleAttention(0, 2, 2), ValueError, ("dim", *POSITIVE)),
    build("multipole", "heads-not-divisor", lambda: MultipoleAttention(8, 3, 2), ValueError, ("n_heads",)),
    build("multipole", "spatial-dims-4", lambda: MultipoleAttention(8, 2, 4), ValueError, ("spatial_dims", "4")),
    build("multipole", "window-zero", lambda: multipole(window=0), ValueError, ("window", *POSITIVE, "got 0")),
    build("multipole", "window-three-for-2d", lambda: multipole(window=(2, 2, 2)), ValueError,
          ("window: expected an int or 2 ints",)),
    build("multipole", "pool-factor-one", lambda: multipole(pool_factor=1), ValueError, ("pool_factor", "1")),
    build("multipole", "pool-unknown", lambda: multipole(pool="max"), ValueError,
          ("pool: expected one of", "got 'max'")),
    build("multipole", "unpool-unknown", lambda: multipole(unpool="cubic"), ValueError,
          ("unpool: expected one of", "got 'cubic'")),
    build("multipole", "window-fraction-above-one", lambda: MultipoleAttention(8, 2, 2, window_fraction=1.5),
          ValueError, ("window_fraction", "1.5")),
    build("multipole", "window-and-fraction", lambda: multipole(window_fraction=0.5), ValueError,
          ("window", "window_fraction")),
    build("multipole", "max-levels-zero", lambda: multipole(max_levels=0), ValueError, ("max_levels", "0")),
    build("multipole", "rel-pos-bias-negative", lambda: multipole(rel_pos_bias=-1), ValueError,
          ("rel_pos_bias", "-1")),
    fwd("multipole", "x-rank", multipole, lambda m: m(_r(2, 8, 4)), ValueError, ("x: expected a 4-D tensor",)),
    fwd("multipole", "x-channels", multipole, lambda m: m(_r(2, 6, 4, 4)), ValueError, ("x", "8", "6")),
    fwd("multipole", "weights-negative", multipole, lambda m: m(_r(2, 8, 4, 4), -torch.ones(4, 4)), ValueError,
        ("weights: expected", "non-negative")),
    fwd("multipole", "weights-nan", multipole,
        lambda m: m(_r(2, 8, 4, 4), torch.full((4, 4), float("nan"))), ValueError,
        ("weights: expected", "finite", "NaN")),
    fwd("multipole", "weights-wrong-grid", multipole, lambda m: m(_r(2, 8, 4, 4), torch.ones(4, 5)), ValueError,
        ("weights", "shape")),
    fwd("multipole", "backend-unknown", lambda: multipole(backend="nope"), lambda m: m(_r(2, 8, 4, 4)),
        BackendError, ("backend: expected one of", "got 'nope'")),
    # CodomainAttention
    build("codomain", "channels-zero", lambda: CodomainAttention(0), ValueError, ("channels", *POSITIVE)),
    build("codomain", "heads-bool", lambda: CodomainAttention(4, True), TypeError, ("n_heads", *POSITIVE, "bool")),
    build("codomain", "spatial-dims-zero", lambda: CodomainAttention(4, 1, 0), ValueError, ("spatial_dims",)),
    build("codomain", "qkv-unknown", lambda: codomain(qkv="dense"), ValueError, ("qkv: expected one of", "'dense'")),
    build("codomain", "n-modes-zero", lambda: codomain(n_modes=0), ValueError, ("n_modes", "0")),
    build("codomain", "n-modes-three-for-2d", lambda: codomain(n_modes=(2, 2, 2)), ValueError, ("n_modes", "2")),
    build("codomain", "rule-unknown", lambda: codomain(rule="simpson-9"), ValueError, ("rule", "'simpson-9'")),
    build("codomain", "temperature-negative", lambda: codomain(temperature=-1.0), ValueError,
          ("temperature", "-1.0")),
    build("codomain", "head-channels-zero", lambda: codomain(head_channels=0), ValueError, ("head_channels",)),
    fwd("codomain", "x-rank", codomain, lambda m: m(_r(2, 3, 4, 8)), ValueError, ("x: expected a 5-D tensor",)),
    fwd("codomain", "x-channels", codomain, lambda m: m(_r(2, 3, 5, 8, 8)), ValueError, ("x", "4", "5")),
    fwd("codomain", "var-mask-wrong-shape", codomain,
        lambda m: m(_r(2, 3, 4, 8, 8), torch.ones(2, 2, dtype=torch.bool)), ValueError, ("var_mask", "shape")),
    fwd("codomain", "var-mask-all-false", codomain,
        lambda m: m(_r(2, 3, 4, 8, 8), torch.zeros(2, 3, dtype=torch.bool)), ValueError, ("var_mask",)),
    fwd("codomain", "weights-negative", codomain, lambda m: m(_r(2, 3, 4, 8, 8), weights=-torch.ones(8, 8)),
        ValueError, ("weights: expected non-negative finite values",)),  # -1 / -64 would normalise to +1/64
    fwd("codomain", "var-mask-float", codomain, lambda m: m(_r(2, 3, 4, 8, 8), torch.ones(2, 3)),
        TypeError, ("var_mask: expected dtype torch.bool", "torch.float32")),
    fwd("codomain", "weights-wrong-grid", codomain, lambda m: m(_r(2, 3, 4, 8, 8), weights=torch.ones(8, 4)),
        ValueError, ("weights", "shape")),
    build("codomain", "norm-eps-negative", lambda: codomain(norm_eps=-1e-5), ValueError,
          ("norm_eps: expected a positive finite float",)),
    build("codomain", "backend-unknown", lambda: codomain(backend="nope"), ValueError,
          ("backend: expected one of", "for op 'codomain', got 'nope'")),
    # BallAttention
    build("ball", "dim-zero", lambda: BallAttention(0, 2), ValueError, ("dim", *POSITIVE)),
    build("ball", "heads-not-divisor", lambda: BallAttention(8, 3), ValueError, ("n_heads",)),
    build("ball", "ball-size-not-power-of-two", lambda: BallAttention(8, 2, 3, 6), ValueError, ("ball_size", "6")),
    build("ball", "ball-size-zero", lambda: BallAttention(8, 2, 3, 0), ValueError, ("ball_size", *POSITIVE)),
    build("ball", "spatial-dims-bool", lambda: BallAttention(8, 2, True), TypeError, ("spatial_dims", "bool")),
    fwd("ball", "backend-unknown", lambda: ball(backend="nope"), lambda m: m(_r(2, 8, 8), _r(2, 8, 3)), BackendError,
        ("backend: expected one of", "'nope'")),
    fwd("ball", "x-rank", ball, lambda m: m(_r(2, 8), _r(2, 8, 3)), ValueError, ("x: expected a 3-D tensor",)),
    fwd("ball", "x-channels", ball, lambda m: m(_r(2, 8, 5), _r(2, 8, 3)), ValueError, ("x", "8", "5")),
    fwd("ball", "pos-wrong-n", ball, lambda m: m(_r(2, 8, 8), _r(2, 7, 3)), ValueError, ("pos",)),
    fwd("ball", "pos-wrong-dims", ball, lambda m: m(_r(2, 8, 8), _r(2, 8, 2)), ValueError, ("pos", "3")),
    fwd("ball", "mask-wrong-shape", ball,
        lambda m: m(_r(2, 8, 8), _r(2, 8, 3), torch.ones(2, 7, dtype=torch.bool)), ValueError, ("mask",)),
    fwd("ball", "mask-float", ball, lambda m: m(_r(2, 8, 8), _r(2, 8, 3), torch.ones(2, 8)), TypeError,
        ("mask: expected dtype torch.bool", "torch.float32")),
    fwd("ball", "weights-negative", ball, lambda m: m(_r(2, 8, 8), _r(2, 8, 3), None, -torch.ones(2, 8)),
        ValueError, ("weights: expected", "non-negative")),
    fwd("ball", "weights-wrong-shape", ball, lambda m: m(_r(2, 8, 8), _r(2, 8, 3), None, torch.ones(2, 9)),
        ValueError, ("weights",)),
    build("ball", "backend-unknown", lambda: ball(backend="nope"), ValueError,
          ("backend: expected one of ['sdpa', 'flex', 'reference'] for op 'ball', got 'nope'",)),
    # SphericalAttention, SphericalNeighborhoodAttention
    build("spherical", "channels-zero", lambda: SphericalAttention(0, 1, (4, 8)), ValueError,
          ("in_channels", *POSITIVE)),
    build("spherical", "heads-not-divisor", lambda: SphericalAttention(4, 3, (4, 8)), ValueError,
          ("n_heads: expected a divisor of k_channels=4, got 3",)),
    build("spherical", "in-shape-one-axis", lambda: SphericalAttention(4, 2, (4,)), ValueError, ("in_shape",)),
    build("spherical", "in-shape-zero", lambda: SphericalAttention(4, 2, (0, 8)), ValueError, ("in_shape",)),
    build("spherical", "grid-unknown", lambda: sph(grid_in="healpix"), ValueError,
          ("grid_in: expected one of", "'healpix'")),
    build("spherical", "grid-out-unknown", lambda: sph(grid_out="cubed"), ValueError,
          ("grid_out: expected one of", "'cubed'")),
    build("spherical", "k-channels-bool", lambda: sph(k_channels=True), TypeError, ("k_channels", "bool")),
    build("spherical", "out-channels-not-divisible", lambda: sph(out_channels=3), ValueError,
          ("n_heads: expected a divisor of out_channels=3",)),
    build("spherical", "longitude-ratio", lambda: SphericalAttention(4, 2, (4, 8), (4, 5)), ValueError, ("nlon",)),
    build("spherical-nbhd", "theta-cutoff-negative", lambda: sph_nbhd(theta_cutoff=-0.1), ValueError,
          ("theta_cutoff", "-0.1")),
    build("spherical-nbhd", "grid-unknown", lambda: sph_nbhd(grid_in="icosa"), ValueError, ("grid_in", "'icosa'")),
    fwd("spherical", "x-rank", sph, lambda m: m(_r(2, 4, 32)), ValueError, ("query", "4-D")),
    fwd("spherical", "x-grid", sph, lambda m: m(_r(2, 4, 4, 9)), ValueError, ("query", "(B, 4, 4, 8)")),
    fwd("spherical", "x-channels", sph, lambda m: m(_r(2, 3, 4, 8)), ValueError, ("query", "4")),
    fwd("spherical", "key-grid", lambda: SphericalAttention(4, 2, (4, 8), (2, 8)),
        lambda m: m(_r(2, 4, 2, 8), _r(2, 4, 4, 4), _r(2, 4, 4, 4)), ValueError, ("key",)),
    fwd("spherical", "backend-unknown", lambda: sph(backend="nope"), lambda m: m(_r(2, 4, 4, 8)), BackendError,
        ("backend: expected one of", "'nope'")),
    fwd("spherical-nbhd", "x-rank", sph_nbhd, lambda m: m(_r(2, 4, 32)), ValueError, ("4-D",)),
    fwd("spherical-nbhd", "x-grid", sph_nbhd, lambda m: m(_r(2, 4, 5, 8)), ValueError, ("(B, 4, 4, 8)",)),
    build("spherical", "backend-unknown", lambda: sph(backend="nope"), ValueError,
          ("backend: expected one of", "for op 'weighted_softmax', got 'nope'")),
    build("spherical", "neighborhood-backend-unknown", lambda: sph_nbhd(backend="nope"), ValueError,
          ("backend: expected one of", "for op 'neighborhood', got 'nope'")),
]


@parametrize(CASES)
def test_layer_bad_input(case: Case):
    run_case(case)
