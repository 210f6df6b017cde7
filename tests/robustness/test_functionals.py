"""Robustness of the attention functionals (issue 23): wrong ranks and shapes, mismatched point
counts, wrong mask shapes and dtypes, negative / NaN / inf weights at real points, all-False masks
where a normalisation needs a real point, unknown and unrunnable backends, bad hyperparameters.

Each functional has a valid call (``_valid``); a case mutates one argument of it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

import sciattn
from sciattn import BackendError
from sciattn.multipole import window_attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cases import Case, parametrize, run_case  # noqa: E402

B, H, N, D, E = 2, 2, 5, 4, 3


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _valid(name: str) -> dict:
    """Valid keyword arguments of each functional (tiny tensors)."""
    if name == "neighborhood":
        return dict(q=_r(B, H, N, D), k=_r(B, H, N, D), v=_r(B, H, N, E),
                    row_offsets=torch.arange(0, N * N + 1, N), col_indices=torch.arange(N).repeat(N))
    if name == "window":
        return dict(q=_r(B, H, 4, 4, D), k=_r(B, H, 4, 4, D), v=_r(B, H, 4, 4, E), window=2)
    if name == "codomain":
        return dict(q=_r(B, H, 3, N, D), k=_r(B, H, 3, N, D), v=_r(B, H, 3, N, E))
    if name == "ball":
        return dict(q=_r(B, H, 8, D), k=_r(B, H, 8, D), v=_r(B, H, 8, E), pos=_r(B, 8, 3), ball_size=4)
    return dict(q=_r(B, H, N, D), k=_r(B, H, N, D), v=_r(B, H, N, E))


FUNCS: dict[str, Callable] = {
    "galerkin": sciattn.galerkin_attention,
    "weighted_softmax": sciattn.weighted_softmax_attention,
    "neighborhood": sciattn.neighborhood_attention,
    "window": window_attention,
    "codomain": sciattn.codomain_attention,
    "ball": sciattn.ball_attention,
}
# the number of points of the key axis and its mask shape, per functional
NK = {"galerkin": N, "weighted_softmax": N, "neighborhood": N, "window": 16, "codomain": N, "ball": 8}
MASK_SHAPE = {"window": (B, 4, 4), "codomain": None}
WEIGHTS_SHAPE = {"window": (B, 4, 4)}
# window and ball name k in a q/k mismatch ("k: expected the shape of q ..."), codomain names q
MISMATCH = {
    "window": ("k: expected the shape of q", "got (2, 2, 4, 4, 4)"),
    "ball": ("k: expected the shape of q", "got (2, 2, 8, 4)"),
    "codomain": ("q: expected the shape of k (2, 2, 3, 5, 4) (B, H, V, N, D)",),
}
# the weights policy (sciattn._checks.check_quadrature_weights), the same wording in every functional
def _policy(name: str, ours: str, ball: str) -> tuple[str, ...]:
    return ("weights: expected non-negative finite values", ours, ball)


def _call(name: str, **change):
    def call():
        kw = _valid(name)
        for key, value in change.items():
            kw[key] = value(kw) if callable(value) else value
        return FUNCS[name](**kw)

    return call


def case(name: str, id: str, exc: type[BaseException], words: tuple[str, ...], one_line: bool = True, **change):
    # a forced Triton backend on CPU is refused without Triton's interpreter: pin it off (TRITON_INTERPRET=1, as
    # DEVELOPERS.md suggests for kernel work, would run the kernel instead)
    env = {"TRITON_INTERPRET": None} if change.get("backend") == "triton" else {}
    return Case("functionals", f"{name}-{id}", _call(name, **change), exc, words, one_line, env)


def _weights(name: str, value: float, where: int = 1) -> Callable[[dict], torch.Tensor]:
    def make(kw):
        shape = WEIGHTS_SHAPE.get(name, (B, NK[name]))
        w = torch.ones(shape)
        w.view(B, -1)[0, where] = value
        return w

    return make


def _generic(name: str) -> list[Case]:
    """The classes every (B, H, ..., D) functional shares."""
    out = [
        case(name, "q-rank", ValueError, ("q: expected a", "-D tensor", "got shape (2, 5)"), q=_r(2, 5)),
        case(name, "k-rank", ValueError, ("k: expected a", "-D tensor"), k=lambda kw: kw["k"][0]),
        case(name, "v-rank", ValueError, ("v: expected a", "-D tensor"), v=lambda kw: kw["v"][..., None]),
        case(name, "q-not-tensor", TypeError, ("q: expected a torch.Tensor, got list",), q=[[1.0]]),
        case(name, "v-not-tensor", TypeError, ("v: expected a torch.Tensor, got ndarray",),
             v=lambda kw: kw["v"].numpy()),
        case(name, "q-head-dim-mismatch", ValueError, MISMATCH.get(name, ("q: expected shape", "to match k")),
             q=lambda kw: kw["q"][..., :2]),
        case(name, "q-batch-mismatch", ValueError, MISMATCH.get(name, ("q: expected shape", "B=2")),
             q=lambda kw: kw["q"][:1]),
        case(name, "v-heads-mismatch", ValueError, ("v: expected shape", "got (2, 1,"), v=lambda kw: kw["v"][:, :1]),
        case(name, "backend-unknown", BackendError, ("backend: expected one of", "got 'no-such-backend'"),
             backend="no-such-backend"),
        case(name, "weights-not-tensor", TypeError, ("weights: expected a torch.Tensor, got list",),
             weights=[1.0] * NK[name]),
        case(name, "weights-negative", ValueError, _policy(name, "-0.5 at index", "non-negative"),
             weights=_weights(name, -0.5)),
        case(name, "weights-nan", ValueError, _policy(name, "got nan", "finite"),
             weights=_weights(name, float("nan"))),
        case(name, "weights-inf", ValueError, _policy(name, "got inf", "finite"),
             weights=_weights(name, float("inf"))),
        case(name, "weights-minus-inf", ValueError, _policy(name, "got -inf", "finite"),
             weights=_weights(name, float("-inf"), where=0)),
        case(name, "weights-wrong-shape", ValueError, ("weights: expected shape",),
             weights=torch.ones(B, NK[name] + 1)),
    ]
    if name != "codomain":
        out += [
            case(name, "mask-wrong-shape", ValueError, ("mask: expected shape",), mask=torch.ones(B, 3, dtype=torch.bool)),
            case(name, "mask-float", TypeError, ("mask: expected dtype torch.bool", "got torch.float32"),
                 mask=lambda kw: torch.ones(MASK_SHAPE.get(name) or (B, NK[name]))),
        ]
    return out


CASES: list[Case] = [c for name in FUNCS for c in _generic(name)]

CASES += [
    # galerkin: a normalised quadrature needs a real point and positive mass in every sample
    case("galerkin", "mask-all-false", ValueError, ("mask: expected at least one True entry", "sample 1"),
         mask=lambda kw: torch.tensor([[True] * N, [False] * N])),
    case("galerkin", "weights-zero-mass", ValueError, ("weights: expected a positive total weight", "sample 0"),
         weights=torch.zeros(N)),
    case("galerkin", "weights-zero-at-real-points", ValueError, ("weights: expected a positive total weight",),
         weights=torch.tensor([[0.0, 0, 1, 1, 1], [1.0] * N]),
         mask=torch.tensor([[True, True, False, False, False], [True] * N])),
    case("galerkin", "nk-zero", ValueError, ("k: expected at least one key/value point, got Nk=0",),
         k=_r(B, H, 0, D), v=_r(B, H, 0, E)),
    case("galerkin", "v-n-mismatch", ValueError, ("v: expected shape", "Nk=5", "to match k"), v=_r(B, H, N + 1, E)),
    case("galerkin", "forced-triton-on-cpu", BackendError, ("backend 'triton'", "galerkin", "triton"),
         one_line=False, backend="triton"),
    case("galerkin", "kv-norm-eps-zero", ValueError, ("kv_norm.eps: expected a positive float", "got 0"),
         kv_norm=(torch.ones(H, D), torch.zeros(H, D), torch.ones(H, E), torch.zeros(H, E), 0.0)),
    # weighted softmax: the distance bias needs all three of its arguments, of matching shapes
    case("weighted_softmax", "v-n-mismatch", ValueError, ("v: expected shape", "Nk=5"), v=_r(B, H, N - 1, E)),
    case("weighted_softmax", "q-pos-alone", ValueError,
         ("distance bias: expected q_pos, k_pos and distance_scale together", "k_pos=None"), q_pos=_r(B, N, 2)),
    case("weighted_softmax", "k-pos-wrong-n", ValueError, ("k_pos: expected shape (2, 5, 2)",),
         q_pos=_r(B, N, 2), k_pos=_r(B, N + 1, 2), distance_scale=torch.ones(H)),
    case("weighted_softmax", "distance-scale-per-batch", ValueError,
         ("distance_scale: expected shape (2,) (one per head)",),
         q_pos=_r(B, N, 2), k_pos=_r(B, N, 2), distance_scale=torch.ones(H, 1)),
    case("weighted_softmax", "q-pos-rank", ValueError, ("q_pos: expected a 3-D tensor",),
         q_pos=_r(N, 2), k_pos=_r(B, N, 2), distance_scale=torch.ones(H)),
    case("weighted_softmax", "forced-triton-on-cpu", BackendError, ("backend 'triton'", "weighted_softmax"),
         one_line=False, backend="triton"),
    case("weighted_softmax", "nk-zero", ValueError, ("k: expected at least one key/value point",),
         k=_r(B, H, 0, D), v=_r(B, H, 0, E)),
    # neighborhood: the CSR index
    case("neighborhood", "row-offsets-short", ValueError, ("row_offsets",),
         row_offsets=torch.arange(0, N * N, N)),
    case("neighborhood", "col-index-out-of-range", ValueError, ("col_indices",),
         col_indices=lambda kw: torch.full_like(kw["col_indices"], N)),
    case("neighborhood", "col-index-negative", ValueError, ("col_indices",),
         col_indices=lambda kw: torch.full_like(kw["col_indices"], -1)),
    case("neighborhood", "row-offsets-decreasing", ValueError, ("row_offsets",),
         row_offsets=lambda kw: kw["row_offsets"].flip(0)),
    case("neighborhood", "forced-triton-on-cpu", BackendError, ("backend 'triton'", "neighborhood"),
         one_line=False, backend="triton"),
    # window: the window and the bias
    case("window", "window-zero", ValueError, ("window", "positive int", "got 0"), window=0),
    case("window", "window-bool", ValueError, ("window: expected an int or 2 ints", "got True"), window=True),
    case("window", "window-wrong-count", ValueError, ("window", "2 ints"), window=(2, 2, 2)),
    case("window", "bias-wrong-shape", ValueError, ("bias",), bias=torch.zeros(H, 3, 3)),
    case("window", "k-grid-mismatch", ValueError, ("k",), k=_r(B, H, 4, 2, D)),
    # codomain: the variable mask
    case("codomain", "var-mask-float", TypeError, ("var_mask", "bool"), var_mask=torch.ones(B, 3)),
    case("codomain", "var-mask-wrong-shape", ValueError, ("var_mask", "shape"),
         var_mask=torch.ones(B, 4, dtype=torch.bool)),
    case("codomain", "k-n-mismatch", ValueError, ("k",), k=_r(B, H, 3, N + 1, D)),
    case("codomain", "temperature-zero", ValueError, ("temperature", "positive"), temperature=0.0),
    # ball: the ball size and the tree-order length
    case("ball", "ball-size-zero", ValueError, ("ball_size: expected a positive int, got 0",), ball_size=0),
    case("ball", "ball-size-bool", TypeError, ("ball_size: expected a positive int, got bool",), ball_size=True),
    case("ball", "p-not-multiple-of-ball", ValueError, ("ball_size",), ball_size=3),
    case("ball", "pos-wrong-n", ValueError, ("pos",), pos=_r(B, 7, 3)),
    case("ball", "sigma-wrong-shape", ValueError, ("sigma",), sigma=torch.ones(H + 1)),
    case("ball", "pos-rank", ValueError, ("pos: expected a 3-D tensor",), pos=_r(8, 3)),
]


@parametrize(CASES)
def test_functional_bad_input(case: Case):
    run_case(case)
