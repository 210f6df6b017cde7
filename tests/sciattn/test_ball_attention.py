"""Ball attention: backends against the float64 reference (outputs and gradients), independent dense
formulas, the trainable distance bias, padding and permutation invariances, the PyG adapter, errors."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from sciattn import BackendError
from sciattn._dispatch import backends_for
from sciattn.balltree import (
    BallAttention,
    ball_attention,
    build_ball_tree,
    dense_points_from_pyg,
    pyg_from_dense,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _dense_attention import dense_biased_attention  # noqa: E402

F64 = torch.float64
BACKENDS = [b.name for b in backends_for("ball")]


def _inputs(seed, b=2, h=3, p=64, d=5, e=4, dim=3):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, p, d, dtype=F64, generator=g) for _ in range(2))
    v = torch.randn(b, h, p, e, dtype=F64, generator=g)
    pos = torch.randn(b, p, dim, dtype=F64, generator=g)
    mask = torch.rand(b, p, generator=g) > 0.3
    mask[1, 16:32] = False  # an empty ball
    w = torch.rand(b, p, dtype=F64, generator=g) + 0.1
    sigma = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    return q, k, v, pos, mask, w, sigma


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_block_diagonal_dense_formula_with_weights_mask_bias_and_empty_ball(backend):
    q, k, v, pos, mask, w, sigma = _inputs(1)
    m = 16
    got = ball_attention(q, k, v, pos, m, mask=mask, weights=w, sigma=sigma, backend=backend)
    ball = torch.arange(64) // m
    same = ball[:, None] == ball[None, :]
    want = dense_biased_attention(q, k, v, pos, torch.log(w * mask), sigma, same)
    torch.testing.assert_close(got.transpose(1, 2)[mask], want.transpose(1, 2)[mask], rtol=1e-10, atol=1e-12)
    assert torch.equal(got[1, :, 16:32], torch.zeros_like(got[1, :, 16:32]))  # empty ball -> 0


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "reference"])
def test_backends_match_reference_in_outputs_and_gradients(backend):
    q, k, v, pos, mask, w, sigma = _inputs(2)
    cot = torch.randn(2, 3, 64, 4, dtype=F64, generator=torch.Generator().manual_seed(9))
    grads_qkv = backend != "flex"  # PyTorch's flex_attention has no CPU backward for q, k, v

    def run(name):
        leaves = [sigma.clone().requires_grad_(), w.clone().requires_grad_()]
        qkv = [t.clone().requires_grad_(grads_qkv) for t in (q, k, v)]
        out = ball_attention(*qkv, pos, 16, mask=mask, weights=leaves[1], sigma=leaves[0], backend=name)
        (out * cot).sum().backward()
        return [out.detach()] + [t.grad for t in leaves] + ([t.grad for t in qkv] if grads_qkv else [])

    for got, want in zip(run(backend), run("reference")):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("with_sigma", [True, False])
def test_cpu_chunked_sdpa_matches_reference_in_outputs_and_gradients(monkeypatch, with_sigma):
    """Chunks of 3 balls (not a divisor of B·H·M = 24, so chunks cross clouds and heads)."""
    import sciattn._blocked_sdpa as blocked

    monkeypatch.setattr(blocked, "CPU_SCORES_PER_CALL", 3 * 16 * 16)
    q, k, v, pos, mask, w, sigma = _inputs(3)
    cot = torch.randn(2, 3, 64, 4, dtype=F64, generator=torch.Generator().manual_seed(5))

    def run(name):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, w, sigma)]
        sig = leaves[4] if with_sigma else None
        out = ball_attention(*leaves[:3], pos, 16, mask=mask, weights=leaves[3], sigma=sig, backend=name)
        (out * cot).sum().backward()
        return [out.detach()] + [t.grad for t in leaves[: 5 if with_sigma else 4]]

    for got, want in zip(run("sdpa"), run("reference")):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("p,m", [(512, 256), (512, 16), (768, 256), (64, 16), (1024, 128)])
def test_flex_block_mask_lists_exactly_the_blocks_that_share_a_ball(p, m):
    """Eager flex on CPU evaluates the mask_mod densely, so the block lists (used by the compiled
    kernel to skip work) are checked here directly against the ball structure."""
    from sciattn.balltree.functional import _ball_block_mask

    blocks = _ball_block_mask(p, m, lambda b, h, q, k: q // m == k // m, "cpu").to_dense()[0, 0].bool()
    ball = torch.arange(p) // m
    same = ball[:, None] == ball[None, :]
    nb = -(-p // 128)
    want = torch.zeros(nb, nb, dtype=torch.bool)
    for r in range(nb):
        for c in range(nb):
            want[r, c] = same[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128].any()
    assert torch.equal(blocks, want)


def test_flex_refuses_qkv_gradients_on_cpu_with_a_clear_error():
    q, k, v, pos, mask, w, sigma = _inputs(3)
    with pytest.raises(RuntimeError, match="'flex' cannot differentiate q, k or v on CPU"):
        ball_attention(q.requires_grad_(), k, v, pos, 16, mask=mask, backend="flex")
    with torch.no_grad():
        ball_attention(q, k, v, pos, 16, mask=mask, backend="flex")


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_poisoned_padding_is_invisible(backend):
    q, k, v, pos, mask, w, sigma = _inputs(4)
    clean = ball_attention(q, k, v, pos, 16, mask=mask, weights=w, sigma=sigma, backend=backend)
    poison = [t.clone() for t in (q, k, v)]
    for t in poison:
        t.masked_fill_(~mask[:, None, :, None], float("nan"))
    pos2, w2 = pos.masked_fill(~mask[..., None], float("nan")), w.masked_fill(~mask, float("nan"))
    got = ball_attention(*poison, pos2, 16, mask=mask, weights=w2, sigma=sigma, backend=backend)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.transpose(1, 2)[mask], clean.transpose(1, 2)[mask], rtol=0, atol=0)


def test_weight_scale_cancels_and_zero_weight_equals_masking():
    q, k, v, pos, mask, w, sigma = _inputs(5)
    a = ball_attention(q, k, v, pos, 16, weights=w, sigma=sigma)
    torch.testing.assert_close(a, ball_attention(q, k, v, pos, 16, weights=7.0 * w, sigma=sigma))
    torch.testing.assert_close(
        ball_attention(q, k, v, pos, 16, weights=w * mask, sigma=sigma).transpose(1, 2)[mask],
        ball_attention(q, k, v, pos, 16, mask=mask, weights=w, sigma=sigma).transpose(1, 2)[mask],
    )
    uniform = ball_attention(q, k, v, pos, 16, weights=torch.ones(64, dtype=F64))
    plain = torch.softmax(
        q.unflatten(2, (4, 16)) @ k.unflatten(2, (4, 16)).transpose(-1, -2) / math.sqrt(5), -1
    ) @ v.unflatten(2, (4, 16))
    torch.testing.assert_close(uniform, plain.flatten(2, 3))


def _module_dense(mod, x, pos, w):
    """BallAttention with one ball holding every point, written as dense attention (one cloud, no padding)."""
    c = pos.mean(1, keepdim=True)
    h = x + mod.pe(pos - c)
    q, k, v = mod.qkv(h).unflatten(-1, (3, mod.n_heads, mod.head_dim)).permute(2, 0, 3, 1, 4)
    z = dense_biased_attention(q, k, v, pos, torch.log(w), mod.sigma)
    return mod.proj(z.transpose(1, 2).flatten(2))


def test_one_ball_holding_all_points_equals_dense_attention_with_the_same_bias():
    torch.manual_seed(0)
    mod = BallAttention(8, 2, 3, ball_size=64).double()
    x, pos = torch.randn(1, 45, 8, dtype=F64), torch.rand(1, 45, 3, dtype=F64)
    w = torch.rand(1, 45, dtype=F64) + 0.2
    torch.testing.assert_close(mod(x, pos, weights=w), _module_dense(mod, x, pos, w), rtol=1e-10, atol=1e-12)


def test_sigma_is_trained_and_changes_the_output():
    torch.manual_seed(0)
    mod = BallAttention(8, 2, 2, ball_size=8).double()
    x, pos = torch.randn(2, 40, 8, dtype=F64), torch.rand(2, 40, 2, dtype=F64)
    y = mod(x, pos)
    y.square().sum().backward()
    assert mod.sigma.grad is not None and mod.sigma.grad.abs().min() > 0
    with torch.no_grad():
        mod.sigma.add_(1.0)
    assert (mod(x, pos) - y).abs().max() > 1e-3


def test_permutation_equivariance_and_padding_invariance_with_mixed_cloud_sizes():
    torch.manual_seed(1)
    mod = BallAttention(8, 2, 3, ball_size=16).double()
    sizes = [70, 9, 33]  # 9 < one ball
    n = 80
    x = torch.full((3, n, 8), float("nan"), dtype=F64)
    pos = torch.full((3, n, 3), float("nan"), dtype=F64)
    w = torch.full((3, n), float("nan"), dtype=F64)
    mask = torch.zeros(3, n, dtype=torch.bool)
    alone = []
    for b, s in enumerate(sizes):
        xb, pb, wb = torch.randn(1, s, 8, dtype=F64), torch.rand(1, s, 3, dtype=F64), torch.rand(1, s, dtype=F64) + 0.1
        x[b, :s], pos[b, :s], w[b, :s], mask[b, :s] = xb[0], pb[0], wb[0], True
        alone.append(mod(xb, pb, weights=wb)[0])
    y = mod(x, pos, mask, w)
    for b, s in enumerate(sizes):
        torch.testing.assert_close(y[b, :s], alone[b], rtol=1e-12, atol=1e-12)
    perm = torch.randperm(n)
    yp = mod(x[:, perm], pos[:, perm], mask[:, perm], w[:, perm])
    torch.testing.assert_close(yp[mask[:, perm]], y[:, perm][mask[:, perm]], rtol=1e-12, atol=1e-12)


def test_pyg_batch_round_trip_equals_dense_forward():
    pyg = pytest.importorskip("torch_geometric.data")
    torch.manual_seed(2)
    mod = BallAttention(8, 2, 2, ball_size=8).double()
    graphs = [pyg.Data(x=torch.randn(s, 8, dtype=F64), pos=torch.rand(s, 2, dtype=F64),
                       weights=torch.rand(s, dtype=F64) + 0.1) for s in (13, 5, 20)]
    batch = pyg.Batch.from_data_list(graphs)
    dense = dense_points_from_pyg(batch)
    out = pyg_from_dense(mod(dense["x"], dense["pos"], dense["mask"], dense["weights"]), dense["mask"])
    want = torch.cat([mod(g.x[None], g.pos[None], weights=g.weights[None])[0] for g in graphs])
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_given_tree_is_used_and_float32_sdpa_is_close_to_float64():
    torch.manual_seed(3)
    mod = BallAttention(8, 2, 3, ball_size=16)
    x, pos = torch.randn(2, 50, 8), torch.rand(2, 50, 3)
    tree = build_ball_tree(pos, None, 16)
    y32 = mod(x, pos, tree=tree)
    y64 = mod.double()(x.double(), pos.double())
    torch.testing.assert_close(y32.double(), y64, rtol=1e-4, atol=1e-5)


def test_errors_name_the_argument():
    q, k, v, pos, mask, w, sigma = _inputs(6)
    with pytest.raises(ValueError, match="q: expected a token count that is a positive multiple of ball_size=24"):
        ball_attention(q, k, v, pos, 24)
    with pytest.raises(ValueError, match=r"sigma: expected shape \(3,\)"):
        ball_attention(q, k, v, pos, 16, sigma=torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match=r"pos: expected shape \(2, 64, 'd'\)"):
        ball_attention(q, k, v, pos[:, :32], 16)
    with pytest.raises(ValueError, match="weights: expected non-negative"):
        ball_attention(q, k, v, pos, 16, weights=-w)
    with pytest.raises(BackendError, match="backend: expected one of"):
        ball_attention(q, k, v, pos, 16, backend="cuda_magic")
    mod = BallAttention(8, 2, 3, ball_size=16)
    with pytest.raises(ValueError, match="pos: expected size 3 along axis 2"):
        mod(torch.randn(1, 10, 8), torch.rand(1, 10, 2))
    with pytest.raises(ValueError, match="ball_size: expected a power of two"):
        BallAttention(8, 2, 3, ball_size=12)
    with pytest.raises(ValueError, match="n_heads: expected a divisor of dim=8"):
        BallAttention(8, 3)
