"""Quadrature-weighted softmax attention: every CPU backend against a dense float64 oracle.

The oracle below evaluates Σ_j w_j e^{s_ij} v_j / Σ_j w_j e^{s_ij} literally (weights multiply the
exponentials; no softmax, no log-weights), so it shares no code or formulation with the backends.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from sciattn import BackendError
from sciattn._capabilities import has_triton
from sciattn._dispatch import backends_for, select_backend
from sciattn.weighted_softmax import weighted_softmax_attention
from sciattn.weighted_softmax._cpu import unavailable as cpu_unavailable

F64 = torch.float64
CPU_GRAD_BACKENDS = ["reference", "sdpa", "chunked"] + ([] if cpu_unavailable() else ["cpu"])  # flex: no CPU backward
CPU_DEFAULT = "chunked" if cpu_unavailable() else "cpu"  # the fused C++ kernels where they build
CPU_BACKENDS = CPU_GRAD_BACKENDS + ["flex"]
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def dense_oracle(q, k, v, w, scale, q_pos=None, k_pos=None, lam=None):
    """out_i = Σ_j w_j exp(s_ij) v_j / Σ_j w_j exp(s_ij); w (B, Nk), 0 = excluded; 0 where Σ w = 0."""
    s = scale * torch.einsum("bhid,bhjd->bhij", q, k)
    if lam is not None:
        dist = ((q_pos[:, :, None] - k_pos[:, None]) ** 2).sum(-1).sqrt()
        s = s - lam[None, :, None, None] * dist[:, None]
    live = (w > 0)[:, None, None, :]
    shift = torch.where(live, s, torch.full_like(s, -math.inf)).amax(-1, keepdim=True).detach()
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.where(live, w[:, None, None, :] * torch.exp(s - shift), torch.zeros_like(s))
    den = e.sum(-1, keepdim=True)
    return torch.where(den > 0, (e @ v) / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))


def make_case(b=2, h=2, nq=6, nk=9, d=5, e=3, p=2, dtype=F64, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = dict(
        q=torch.randn(b, h, nq, d, generator=g, dtype=F64),
        k=torch.randn(b, h, nk, d, generator=g, dtype=F64),
        v=torch.randn(b, h, nk, e, generator=g, dtype=F64),
        weights=torch.rand(b, nk, generator=g, dtype=F64) * 2 + 0.05,
        q_pos=torch.randn(b, nq, p, generator=g, dtype=F64),
        k_pos=torch.randn(b, nk, p, generator=g, dtype=F64),
        distance_scale=torch.rand(h, generator=g, dtype=F64) + 0.2,
    )
    mask = torch.rand(b, nk, generator=g) > 0.3
    mask[:, 0] = True
    return {n: x.to(dtype) if n in "qkv" else x for n, x in t.items()}, mask


def _oracle_inputs(t, mask):
    w = t["weights"] * mask
    return (t["q"].double(), t["k"].double(), t["v"].double(), w)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("distance", [False, True])
def test_backends_match_dense_oracle_with_weights_mask_and_nq_ne_nk(backend, distance):
    t, mask = make_case()
    kw = dict(q_pos=t["q_pos"], k_pos=t["k_pos"], distance_scale=t["distance_scale"]) if distance else {}
    scale = 0.7
    with torch.no_grad():
        got = weighted_softmax_attention(t["q"], t["k"], t["v"], t["weights"], mask, scale=scale, backend=backend, **kw)
    want = dense_oracle(*_oracle_inputs(t, mask), scale, kw.get("q_pos"), kw.get("k_pos"), kw.get("distance_scale"))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", CPU_GRAD_BACKENDS)
def test_all_gradients_match_dense_oracle_including_distance_scale(backend):
    t, mask = make_case(seed=1)
    names = ["q", "k", "v", "weights", "q_pos", "k_pos", "distance_scale"]
    a = {n: t[n].clone().requires_grad_() for n in names}
    b = {n: t[n].clone().requires_grad_() for n in names}
    got = weighted_softmax_attention(a["q"], a["k"], a["v"], a["weights"], mask, q_pos=a["q_pos"],
                                     k_pos=a["k_pos"], distance_scale=a["distance_scale"], backend=backend)
    want = dense_oracle(b["q"], b["k"], b["v"], b["weights"] * mask, 1 / math.sqrt(5), b["q_pos"], b["k_pos"],
                        b["distance_scale"])
    g = torch.randn_like(want)
    ga = torch.autograd.grad(got, [a[n] for n in names], g)
    gb = torch.autograd.grad(want, [b[n] for n in names], g)
    for n, x, y in zip(names, ga, gb):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-11, msg=lambda m, n=n: f"d{n}: {m}")
    assert ga[3][~mask].abs().max() == 0  # masked weights get no gradient
    assert ga[-1].abs().min() > 0  # the distance scale really is trained


def test_reference_gradcheck_float64_with_distance_bias():
    t, mask = make_case(b=1, h=2, nq=3, nk=4, d=2, e=2, p=2, seed=2)
    names = ["q", "k", "v", "weights", "q_pos", "k_pos", "distance_scale"]
    args = [t[n].clone().requires_grad_() for n in names]

    def f(q, k, v, w, qp, kp, lam):
        return weighted_softmax_attention(q, k, v, w, mask, q_pos=qp, k_pos=kp, distance_scale=lam, backend="reference")

    assert torch.autograd.gradcheck(f, args)


def test_uniform_weights_equal_plain_softmax_and_only_relative_weights_matter():
    t, _ = make_case(seed=3)
    plain = torch.softmax(t["q"] @ t["k"].transpose(-1, -2) / math.sqrt(5), -1) @ t["v"]
    torch.testing.assert_close(weighted_softmax_attention(t["q"], t["k"], t["v"]), plain)
    a = weighted_softmax_attention(t["q"], t["k"], t["v"], t["weights"])
    torch.testing.assert_close(weighted_softmax_attention(t["q"], t["k"], t["v"], 7.5 * t["weights"]), a)
    # integer weights = duplicated keys: weight 2 on key 0 equals key 0 listed twice with weight 1
    w = torch.ones(9, dtype=F64)
    w[0] = 2
    dup = [torch.cat([x[:, :, :1], x], dim=2) for x in (t["k"], t["v"])]
    torch.testing.assert_close(weighted_softmax_attention(t["q"], t["k"], t["v"], w),
                               weighted_softmax_attention(t["q"], *dup))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_padding_is_invisible_even_when_poisoned_with_nan(backend):
    t, _ = make_case(b=2, nk=7, seed=4)
    pad = 3
    poisoned = {}
    for n in ("k", "v"):
        x = t[n]
        poisoned[n] = torch.cat([x, torch.full((*x.shape[:2], pad, x.shape[3]), math.nan, dtype=x.dtype)], dim=2)
    poisoned["weights"] = torch.cat([t["weights"], torch.full((2, pad), math.nan, dtype=F64)], dim=1)
    poisoned["k_pos"] = torch.cat([t["k_pos"], torch.full((2, pad, 2), math.nan, dtype=F64)], dim=1)
    mask = torch.ones(2, 7 + pad, dtype=torch.bool)
    mask[:, 7:] = False
    grad = backend in CPU_GRAD_BACKENDS
    leaves = {n: poisoned[n].clone().requires_grad_(grad) for n in poisoned}
    q, lam = t["q"].clone().requires_grad_(grad), t["distance_scale"].clone().requires_grad_(grad)
    with torch.set_grad_enabled(grad):
        got = weighted_softmax_attention(q, leaves["k"], leaves["v"], leaves["weights"], mask, q_pos=t["q_pos"],
                                         k_pos=leaves["k_pos"], distance_scale=lam, backend=backend)
    want = dense_oracle(t["q"], t["k"], t["v"], t["weights"], 1 / math.sqrt(5), t["q_pos"], t["k_pos"],
                        t["distance_scale"])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    if grad:
        got.sum().backward()
        for n, leaf in leaves.items():
            assert torch.isfinite(leaf.grad).all(), n
            assert leaf.grad[:, :, 7:].abs().max() == 0 if n in "kv" else leaf.grad[:, 7:].abs().max() == 0, n
        assert torch.isfinite(q.grad).all() and torch.isfinite(lam.grad).all()


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_query_with_no_live_key_gets_zeros(backend):
    t, mask = make_case(seed=5)
    mask[1] = False  # second sample: every key padded
    w = t["weights"].clone()
    w[0, 1:] = 0  # first sample: only key 0 has weight
    with torch.no_grad():
        got = weighted_softmax_attention(t["q"], t["k"], t["v"], w, mask, backend=backend)
    assert got[1].abs().max() == 0
    torch.testing.assert_close(got[0], t["v"][0, :, :1].expand(-1, 6, -1))


@pytest.mark.parametrize("backend", CPU_GRAD_BACKENDS)
def test_float32_distance_gradients_are_accurate_away_from_the_origin(backend):
    """Distances are translation invariant, so shifting every position by 10 must not cost accuracy."""
    t, mask = make_case(b=1, h=2, nq=13, nk=40, p=3, seed=8)
    t["q_pos"], t["k_pos"] = t["q_pos"] + 10, t["k_pos"] + 10
    names = ("q_pos", "k_pos", "distance_scale")
    a = {n: t[n].float().requires_grad_() for n in names}
    b = {n: t[n].clone().requires_grad_() for n in names}
    got = weighted_softmax_attention(t["q"].float(), t["k"].float(), t["v"].float(), t["weights"].float(), mask,
                                     backend=backend, **a)
    want = dense_oracle(*_oracle_inputs(t, mask), 1 / math.sqrt(5), b["q_pos"], b["k_pos"], b["distance_scale"])
    rtol, atol = next(x for x in backends_for("weighted_softmax") if x.name == backend).tolerances[torch.float32]
    for n, x, y in zip(names, torch.autograd.grad(got.sum(), list(a.values())), torch.autograd.grad(want.sum(), list(b.values()))):
        bound = atol * float(y.abs().max()) + rtol * y.abs()
        assert bool(((x.double() - y).abs() <= bound).all()), f"d{n}: max error {float((x.double() - y).abs().max()):.3g}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_half_precision_within_declared_tolerance(dtype):
    t, mask = make_case(b=1, nq=16, nk=24, d=8, e=8, dtype=dtype, seed=6)
    got = weighted_softmax_attention(t["q"], t["k"], t["v"], t["weights"], mask, q_pos=t["q_pos"],
                                     k_pos=t["k_pos"], distance_scale=t["distance_scale"], backend="sdpa")
    assert got.dtype == dtype
    want = dense_oracle(*_oracle_inputs(t, mask), 1 / math.sqrt(8), t["q_pos"], t["k_pos"], t["distance_scale"])
    rtol, atol = next(b for b in backends_for("weighted_softmax") if b.name == "sdpa").tolerances[dtype]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)


_q = torch.zeros(1, 2, 3, 4)
_k = torch.zeros(1, 2, 5, 4)
_v = torch.zeros(1, 2, 5, 3)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(q=torch.zeros(2, 3, 4)), ValueError, r"q: expected a 4-D tensor"),
        (dict(q=torch.zeros(1, 2, 3, 6)), ValueError, r"q: expected shape \(B=1, H=2, Nq, D=4\)"),
        (dict(v=torch.zeros(1, 2, 4, 3)), ValueError, r"v: expected shape \(B=1, H=2, Nk=5, E\)"),
        (dict(k=torch.zeros(1, 2, 0, 4), v=torch.zeros(1, 2, 0, 3)), ValueError, r"k: expected at least one key"),
        (dict(weights=torch.ones(4)), ValueError, r"weights: expected shape \(5,\) or \(1, 5\)"),
        (dict(mask=torch.ones(1, 5)), TypeError, r"mask: expected dtype torch.bool"),
        (dict(mask=torch.ones(1, 4, dtype=torch.bool)), ValueError, r"mask: expected shape \(1, 5\)"),
        (dict(q_pos=torch.zeros(1, 3, 2)), ValueError, r"q_pos=set, k_pos=None, distance_scale=None"),
        (dict(q_pos=torch.zeros(1, 3, 2), k_pos=torch.zeros(1, 5, 3), distance_scale=torch.ones(2)),
         ValueError, r"k_pos: expected shape \(1, 5, 2\)"),
        (dict(q_pos=torch.zeros(1, 3, 2), k_pos=torch.zeros(1, 5, 2), distance_scale=torch.ones(3)),
         ValueError, r"distance_scale: expected shape \(2,\) \(one per head\)"),
        (dict(backend="nope"), BackendError, r"backend: expected one of .*'sdpa'"),
    ],
)
def test_bad_inputs_raise_errors_naming_the_argument(kwargs, exc, match):
    args = dict(q=_q, k=_k, v=_v)
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc, match=match):
        weighted_softmax_attention(q, k, v, **args)


def test_forced_backend_that_cannot_run_lists_why_each_was_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q = _q.clone().requires_grad_()
    with pytest.raises(BackendError) as info:
        weighted_softmax_attention(q, _k, _v, backend="flex")
    msg = str(info.value)
    assert "flex: no backward on cpu (only on ('cuda',))" in msg
    assert re.search(r"triton: (.*; )?device cpu not in \('cuda',\)", msg)
    assert "sdpa: ok" in msg and "reference: ok" in msg
    with pytest.raises(BackendError, match=r"triton: .*dtype torch.float64 not in"):
        weighted_softmax_attention(_q.double(), _k.double(), _v.double(), backend="triton")


def test_default_backend_on_cpu_is_the_kernel_or_chunked_then_sdpa_with_and_without_gradients(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreted kernels are never an automatic choice
    props = dict(device=torch.device("cpu"), dtype=torch.float32, head_dim=64, has_mask=True, has_weights=True)
    assert select_backend("weighted_softmax", None, **props).name == CPU_DEFAULT
    assert select_backend("weighted_softmax", None, requires_grad=True, **props).name == CPU_DEFAULT
    monkeypatch.setenv("SCIATTN_CPU_KERNELS", "0")  # the switch hands the CPU back to chunked
    assert select_backend("weighted_softmax", None, requires_grad=True, **props).name == "chunked"
    monkeypatch.delenv("SCIATTN_CPU_KERNELS")
    assert select_backend("weighted_softmax", None, **{**props, "dtype": torch.bfloat16}).name == "sdpa"
    assert select_backend("weighted_softmax", None, **{**props, "device": torch.device("cuda")}).name == "sdpa"
    if not has_triton():
        pytest.skip("triton is not installed: the forced kernel choice needs it")
    assert select_backend("weighted_softmax", "triton", requires_grad=True, **props).name == "triton"


def test_compiles_with_fullgraph_on_cpu_forward_and_backward():
    t, mask = make_case(b=1, h=1, nq=4, nk=5, d=4, e=2, dtype=torch.float32, seed=7)
    t = {n: x.float() for n, x in t.items()}
    lam = t["distance_scale"].clone().requires_grad_()
    q = t["q"].clone().requires_grad_()

    def f(q, lam):
        return weighted_softmax_attention(q, t["k"], t["v"], t["weights"], mask, q_pos=t["q_pos"], k_pos=t["k_pos"],
                                          distance_scale=lam)

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, lam)
    want = f(t["q"], t["distance_scale"])
    torch.testing.assert_close(got, want)
    gq, glam = torch.autograd.grad(got.square().sum(), [q, lam])
    wq, wlam = torch.autograd.grad(F.mse_loss(f(q, lam), torch.zeros_like(want), reduction="sum"), [q, lam])
    torch.testing.assert_close(gq, wq)
    torch.testing.assert_close(glam, wlam)
