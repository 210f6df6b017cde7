"""Codomain attention: functional against a brute-force oracle and analytic integrals, the
domain-parallel form, the block and the variable encodings."""

from __future__ import annotations

import itertools
import math
import os
import sys

import pytest
import torch
import torch.distributed as dist

from sciattn import BackendError
from sciattn.codomain import (
    CodomainAttention,
    FourierField,
    QuadratureInstanceNorm,
    VariableEncoding,
    codomain_attention,
    codomain_logits,
)
from sciattn.codomain.positional import grid_positions
from sciattn.domain import Grid

sys.path.insert(0, os.path.dirname(__file__))
from _gloo import gloo_group, run_ranks  # noqa: E402

F64 = torch.float64


def _oracle(q, k, v, w=None, var_mask=None, tau=None):
    """Loops over (sample, head, query variable): Σ_x w_x q_a·k_b / Σ_x w_x, softmax over present b."""
    b, h, nv, n, d = q.shape
    tau = math.sqrt(d) if tau is None else tau
    out = torch.zeros(*v.shape, dtype=F64)
    for bi in range(b):
        wb = torch.ones(n, dtype=F64) if w is None else (w[bi] if w.dim() == 2 else w).to(F64)
        wb = wb / wb.sum()
        present = [c for c in range(nv) if var_mask is None or bool(var_mask[bi, c])]
        for hi in range(h):
            for a in present:
                s = torch.stack([(wb[:, None] * q[bi, hi, a] * k[bi, hi, c]).sum() for c in present]) / tau
                alpha = torch.exp(s - s.max())
                alpha = alpha / alpha.sum()
                out[bi, hi, a] = sum(alpha[j] * v[bi, hi, c] for j, c in enumerate(present))
    return out


def _rand(*shape, g):
    return torch.randn(*shape, dtype=F64, generator=g)


# ----------------------------------------------------------------------------- functional values
@pytest.mark.parametrize("shared_weights", [True, False])
def test_matches_bruteforce_oracle_with_mask_and_nonuniform_weights(shared_weights):
    g = torch.Generator().manual_seed(1)
    b, h, nv, n = 2, 2, 4, 9
    q, k = _rand(b, h, nv, n, 3, g=g), _rand(b, h, nv, n, 3, g=g)
    v = _rand(b, h, nv, n, 5, g=g)
    w = torch.rand(n if shared_weights else (b, n), dtype=F64, generator=g) + 0.05
    var_mask = torch.tensor([[True, False, True, True], [False, True, True, False]])
    got = codomain_attention(q, k, v, weights=w, var_mask=var_mask)
    torch.testing.assert_close(got, _oracle(q, k, v, w, var_mask), rtol=1e-12, atol=1e-12)
    # the weights only matter through their normalisation
    torch.testing.assert_close(codomain_attention(q, k, v, weights=7.5 * w, var_mask=var_mask), got)


def test_uniform_default_equals_the_documented_einsum_and_temperature_scales_logits():
    g = torch.Generator().manual_seed(2)
    q, k, v = _rand(2, 3, 5, 11, 4, g=g), _rand(2, 3, 5, 11, 4, g=g), _rand(2, 3, 5, 11, 2, g=g)
    s = torch.einsum("bhand,bhcnd->bhac", q, k) / (11 * 4**0.5)
    torch.testing.assert_close(codomain_attention(q, k, v), torch.einsum("bhac,bhcne->bhane", s.softmax(-1), v))
    torch.testing.assert_close(codomain_logits(q, k, temperature=0.5), s * 4**0.5 / 0.5)
    tau = torch.tensor([0.5, 1.0, 3.0], dtype=F64)
    per_head = codomain_logits(q, k, temperature=tau)
    torch.testing.assert_close(per_head, s * 2.0 / tau[None, :, None, None])
    torch.testing.assert_close(codomain_attention(q, k, v, temperature=tau),
                               torch.einsum("bhac,bhcne->bhane", per_head.softmax(-1), v))


def test_permuting_the_variables_permutes_the_output():
    g = torch.Generator().manual_seed(3)
    q, k, v = _rand(2, 2, 5, 8, 3, g=g), _rand(2, 2, 5, 8, 3, g=g), _rand(2, 2, 5, 8, 4, g=g)
    w = torch.rand(8, dtype=F64, generator=g) + 0.1
    mask = torch.tensor([[True, True, False, True, True], [True, False, True, True, True]])
    perm = torch.tensor([3, 0, 4, 2, 1])
    out = codomain_attention(q, k, v, weights=w, var_mask=mask)
    out_p = codomain_attention(q[:, :, perm], k[:, :, perm], v[:, :, perm], weights=w, var_mask=mask[:, perm])
    torch.testing.assert_close(out_p, out[:, :, perm], rtol=1e-13, atol=1e-13)
    assert (out[0, :, 2] == 0).all() and (out[1, :, 1] == 0).all()  # absent query variables give zero


def test_absent_variables_poisoned_with_nan_change_nothing_and_leave_gradients_finite():
    g = torch.Generator().manual_seed(4)
    q, k, v = _rand(1, 2, 4, 6, 3, g=g), _rand(1, 2, 4, 6, 3, g=g), _rand(1, 2, 4, 6, 3, g=g)
    mask = torch.tensor([[True, False, True, True]])
    keep = [0, 2, 3]
    ref = codomain_attention(q[:, :, keep], k[:, :, keep], v[:, :, keep])
    poisoned = [t.clone().requires_grad_() for t in (q, k, v)]
    with torch.no_grad():
        for t in poisoned:
            t[:, :, 1] = float("nan")
    out = codomain_attention(*poisoned, var_mask=mask)
    torch.testing.assert_close(out[:, :, keep], ref)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in poisoned)
    assert all((t.grad[:, :, 1] == 0).all() for t in poisoned)


def test_gradcheck_with_weights_mask_and_learned_temperature():
    g = torch.Generator().manual_seed(5)
    q, k, v = (_rand(1, 2, 3, 4, 2, g=g).requires_grad_() for _ in range(3))
    w = (torch.rand(4, dtype=F64, generator=g) + 0.2).requires_grad_()
    tau = torch.tensor([0.7, 1.3], dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, False, True]])
    fn = lambda q, k, v, w, tau: codomain_attention(q, k, v, weights=w, var_mask=mask, temperature=tau)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, w, tau), fast_mode=True)


# ----------------------------------------------------------------------------- refinement
def _smooth_qk(n):
    """q, k of 3 variables with 2 channels on the trapezoid grid of [0,1]² with n² nodes."""
    nodes, weights = Grid((n, n), rule="trapezoid").nodes_and_weights(F64)
    x, y = nodes[:, 0], nodes[:, 1]
    q = torch.stack([torch.stack([x**a * torch.exp(y), torch.sin(math.pi * (a + 1) * x)], -1) for a in range(3)])
    k = torch.stack([torch.stack([x**b * y, y**b], -1) for b in range(3)])
    return q[None, None], k[None, None], weights


def _analytic_scores():
    """∫∫ q_a·k_b dx dy = 1/(a+b+1)·∫y e^y dy + (1-cos π(a+1))/(π(a+1))·1/(b+1), with ∫₀¹ y e^y dy = 1."""
    s = torch.zeros(3, 3, dtype=F64)
    for a in range(3):
        for b in range(3):
            s[a, b] = 1 / (a + b + 1) + (1 - math.cos(math.pi * (a + 1))) / (math.pi * (a + 1)) / (b + 1)
    return s


def test_scores_converge_under_refinement_to_the_analytic_integral():
    exact = _analytic_scores()
    errors, scores = [], []
    for n in (32, 64, 128, 256):
        q, k, w = _smooth_qk(n)
        s = codomain_logits(q, k, weights=w, temperature=1.0)[0, 0]
        scores.append(s)
        errors.append((s - exact).abs().max().item())
    diffs = [(b - a).abs().max().item() for a, b in zip(scores, scores[1:])]
    assert all(d1 < d0 / 3 for d0, d1 in zip(diffs, diffs[1:])), diffs  # second order: ratio ~4
    assert all(e1 < e0 / 3 for e0, e1 in zip(errors, errors[1:])), errors
    assert errors[-1] < 2e-5
    # the anchor's normaliser (plain sum over N·D entries / sqrt(N·D)) has no limit: it grows ~ sqrt(N)
    plain = [torch.einsum("bhand,bhcnd->bhac", *_smooth_qk(n)[:2])[0, 0] / math.sqrt(2 * n * n) for n in (32, 256)]
    assert 7.5 < (plain[1].abs().mean() / plain[0].abs().mean()).item() < 8.5


# ----------------------------------------------------------------------------- domain parallel
def _parallel_worker(rank, world, port, results):
    torch.set_num_threads(1)  # this child process only: two workers share the CPU
    with gloo_group(rank, world, port):
        q, k, v, w, mask, grad_out = _parallel_case()
        bounds = [0, 3, 7]  # uneven split of the 7 points
        sl = slice(bounds[rank], bounds[rank + 1])
        local = [t[:, :, :, sl].detach().clone().requires_grad_() for t in (q, k, v)]
        w_local = w[:, sl].detach().clone().requires_grad_()
        out = codomain_attention(*local, weights=w_local, var_mask=mask, group=dist.group.WORLD)
        (out * grad_out[:, :, :, sl]).sum().backward()
        results[rank] = {"out": out.detach(), "grads": [t.grad for t in (*local, w_local)]}


def _parallel_case():
    g = torch.Generator().manual_seed(6)
    q, k, v = _rand(2, 2, 3, 7, 3, g=g), _rand(2, 2, 3, 7, 3, g=g), _rand(2, 2, 3, 7, 4, g=g)
    w = torch.rand(2, 7, dtype=F64, generator=g) + 0.1
    mask = torch.tensor([[True, True, False], [True, True, True]])
    return q, k, v, w, mask, _rand(2, 2, 3, 7, 4, g=g)


def test_domain_parallel_gloo_matches_one_process_outputs_and_gradients():
    results = run_ranks("test_codomain", "_parallel_worker")
    q, k, v, w, mask, grad_out = _parallel_case()
    full = [t.clone().requires_grad_() for t in (q, k, v, w)]
    out = codomain_attention(*full[:3], weights=full[3], var_mask=mask)
    (out * grad_out).sum().backward()
    parts = [results[r] for r in range(2)]
    torch.testing.assert_close(torch.cat([p["out"] for p in parts], dim=3), out.detach(), rtol=1e-12, atol=1e-12)
    for i, t in enumerate(full):
        dim = 1 if i == 3 else 3
        torch.testing.assert_close(torch.cat([p["grads"][i] for p in parts], dim=dim), t.grad, rtol=1e-11, atol=1e-12)


def _bad_weight_worker(rank, world, port, results):
    torch.set_num_threads(1)
    with gloo_group(rank, world, port):
        q, k, v, w, mask, _ = _parallel_case()
        bounds = [0, 3, 7]
        sl = slice(bounds[rank], bounds[rank + 1])
        w_local = w[:, sl].clone()
        if rank == 1:
            w_local[0, 1] = -0.5  # only one rank holds the bad weight
        try:
            codomain_attention(*(t[:, :, :, sl] for t in (q, k, v)), weights=w_local, var_mask=mask,
                               group=dist.group.WORLD)
            results[rank] = "no error"
        except ValueError as err:
            results[rank] = str(err)


def test_domain_parallel_bad_weight_on_one_rank_raises_on_every_rank():
    """A rank raising alone would leave the others waiting in the attention's all-reduce."""
    results = run_ranks("test_codomain", "_bad_weight_worker")
    assert results[1].startswith("weights: expected non-negative finite values at every point, got -0.5"), results
    assert results[0].startswith("weights: expected non-negative finite values at every point on every rank"), results


# ----------------------------------------------------------------------------- errors
def test_bad_inputs_name_argument_expectation_and_value():
    q = torch.randn(1, 2, 3, 5, 4)
    with pytest.raises(ValueError, match=r"q: expected a 5-D tensor \(B, H, V, N, D\), got shape \(2, 3, 5, 4\)"):
        codomain_attention(q[0], q, q)
    with pytest.raises(ValueError, match=r"v: expected shape \(B=1, H=2, V=3, N=5, E\) to match k"):
        codomain_attention(q, q, torch.randn(1, 2, 3, 6, 4))
    with pytest.raises(ValueError, match=r"weights: expected shape \(5,\) or \(1, 5\)"):
        codomain_attention(q, q, q, weights=torch.ones(4))
    with pytest.raises(TypeError, match="var_mask: expected dtype torch.bool, got torch.int64"):
        codomain_attention(q, q, q, var_mask=torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="var_mask: expected at least one present variable per sample"):
        codomain_attention(q, q, q, var_mask=torch.zeros(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="temperature: expected a positive float or None, got -1.0"):
        codomain_attention(q, q, q, temperature=-1.0)
    with pytest.raises(BackendError, match="backend: expected one of \\['reference'\\] for op 'codomain'"):
        codomain_attention(q, q, q, backend="triton_typo")
    with pytest.raises(ValueError, match="group: expected a process group of an initialised torch.distributed"):
        codomain_attention(q, q, q, group=object())


# ----------------------------------------------------------------------------- block
def _bandlimited(b, nv, c, shape, seed=0, kmax=2):
    """Random trigonometric polynomials with |k_i| <= kmax sampled on the uniform grid (same functions at any n)."""
    g = torch.Generator().manual_seed(seed)
    d = len(shape)
    axes = torch.meshgrid(*[torch.arange(n, dtype=F64) / n for n in shape], indexing="ij")
    out = torch.zeros(b, nv, c, *shape, dtype=F64)
    for kv in itertools.product(range(-kmax, kmax + 1), repeat=d):
        phase = 2 * math.pi * sum(kv[i] * axes[i] for i in range(d))
        a, s = torch.randn(2, b, nv, c, generator=g, dtype=F64).reshape(2, b, nv, c, *(1,) * d)
        out += a * torch.cos(phase) + s * torch.sin(phase)
    return out


def test_block_logits_and_outputs_are_resolution_invariant_for_bandlimited_fields():
    block = CodomainAttention(4, 2, 2, n_modes=8).eval()
    outs, logits = {}, {}
    with torch.no_grad():
        for n in (16, 32, 64):
            x = _bandlimited(2, 3, 4, (n, n), seed=7).float()
            outs[n], logits[n] = block(x), block.attention_logits(x)
    torch.testing.assert_close(logits[64], logits[16], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[64][..., ::4, ::4], outs[16], rtol=1e-4, atol=1e-4)
    assert logits[16].std() > 0.05  # not trivially constant


def test_pointwise_block_equals_its_equations_in_float64():
    torch.manual_seed(8)
    block = CodomainAttention(4, 2, 1, head_channels=3, qkv="pointwise", rule="trapezoid").double()
    with torch.no_grad():
        block.norm.weight.uniform_(0.5, 1.5)
        block.norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 3, 4, 9, dtype=F64)
    w = Grid((9,), rule="trapezoid").nodes_and_weights(F64)[1]
    w = w / w.sum()
    mean = (x * w).sum(-1, keepdim=True)
    var = ((x - mean) ** 2 * w).sum(-1, keepdim=True)
    u = (x - mean) / torch.sqrt(var + 1e-5) * block.norm.weight[:, None] + block.norm.bias[:, None]
    t = block.proj(u.transpose(-1, -2)).unflatten(-1, (3, 2, 3))  # (B, V, N, 3, H, Dh)
    q, k, v = (t[..., i, :, :].permute(0, 3, 1, 2, 4).contiguous() for i in range(3))  # (B, H, V, N, Dh)
    z = _oracle(q, k, v, w, tau=math.sqrt(3))
    want = block.out_proj(z.permute(0, 2, 3, 1, 4).reshape(2, 3, 9, 6)).transpose(-1, -2)
    torch.testing.assert_close(block(x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(20,), (10, 9), (6, 5, 4)])
def test_block_in_1d_2d_3d_is_equivariant_and_ignores_absent_variables(shape):
    block = CodomainAttention(4, 2, len(shape), n_modes=4, learn_temperature=True)
    x = torch.randn(2, 4, 4, *shape)
    perm = torch.tensor([2, 0, 3, 1])
    out = block(x)
    torch.testing.assert_close(block(x[:, perm]), out[:, perm], rtol=1e-5, atol=1e-5)
    mask = torch.tensor([[True, True, False, True]] * 2)
    poisoned = x.clone()
    poisoned[:, 2] = float("nan")
    masked = block(poisoned, var_mask=mask)
    torch.testing.assert_close(masked[:, [0, 1, 3]], block(x[:, [0, 1, 3]]), rtol=1e-5, atol=1e-5)
    assert (masked[:, 2] == 0).all()
    masked.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in block.parameters() if p.grad is not None)


def test_quadrature_instance_norm_is_instance_norm_on_uniform_grids_and_weighted_otherwise():
    norm = QuadratureInstanceNorm(3)
    x = torch.randn(2, 4, 3, 50, dtype=F64)
    uniform = torch.full((2, 50), 1 / 50, dtype=F64)
    ref = torch.nn.functional.instance_norm(x.reshape(8, 3, 50), eps=1e-5).reshape(x.shape)
    torch.testing.assert_close(norm.double()(x, uniform), ref)
    w = torch.rand(2, 50, dtype=F64) + 0.1
    w = w / w.sum(1, keepdim=True)
    y = norm(x, w)
    torch.testing.assert_close((y * w[:, None, None]).sum(-1), torch.zeros(2, 4, 3, dtype=F64), atol=1e-12, rtol=0)
    torch.testing.assert_close((y**2 * w[:, None, None]).sum(-1), torch.ones(2, 4, 3, dtype=F64), atol=1e-4, rtol=0)


def test_block_errors_name_the_argument():
    block = CodomainAttention(4, 2, 2, n_modes=4)
    with pytest.raises(ValueError, match=r"x: expected size 4 along axis 2 \(channels per variable\), got 3"):
        block(torch.randn(1, 2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"var_mask: expected a bool tensor of shape \(1, 2\)"):
        block(torch.randn(1, 2, 4, 8, 8), var_mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"weights: expected shape \(8, 8\) or \(1, 8, 8\)"):
        block(torch.randn(1, 2, 4, 8, 8), weights=torch.ones(8))
    with pytest.raises(ValueError, match="qkv: expected one of \\['pointwise', 'spectral'\\], got 'fourier'"):
        CodomainAttention(4, qkv="fourier")
    with pytest.raises(ValueError, match=r"n_modes: expected an int or 2 ints \(one per spatial axis\), got \[4, 4, 4\]"):
        CodomainAttention(4, 2, 2, n_modes=[4, 4, 4])
    with pytest.raises(ValueError, match="n_modes: expected a positive int, got 0"):
        CodomainAttention(4, 2, 2, n_modes=[4, 0])


# ----------------------------------------------------------------------------- encodings
def test_fourier_field_is_one_function_at_every_resolution():
    field = FourierField(2, 2, modes=(3, 2)).double()
    coarse, fine = field((12, 10), dtype=F64), field((48, 40), dtype=F64)
    torch.testing.assert_close(fine[:, ::4, ::4], coarse, rtol=1e-12, atol=1e-12)
    # against the series written out at one point x = (0.25, 0.7)
    x = torch.tensor([[0.25, 0.7]], dtype=F64)
    want = torch.zeros(2, dtype=F64)
    for j, kvec in enumerate(field.freqs.to(F64)):
        ph = 2 * math.pi * (kvec * x[0]).sum()
        want += field.cos[:, j] * torch.cos(ph) + field.sin[:, j] * torch.sin(ph)
    torch.testing.assert_close(field.at(x)[:, 0], want)
    assert len(field.freqs) == (7 * 5 + 1) // 2


@pytest.mark.parametrize("rule", ["uniform", "trapezoid"])
def test_axis_by_axis_grid_evaluation_equals_the_pointwise_series(rule):
    field = FourierField(3, 3, modes=(2, 1, 3)).double()
    shape = (5, 4, 6)
    dense = field.at(grid_positions(shape, None, rule, F64)).reshape(3, *shape)
    torch.testing.assert_close(field(shape, rule=rule, dtype=F64), dense, rtol=1e-12, atol=1e-12)


def test_variable_encoding_grows_at_run_time_and_keeps_existing_values():
    enc = VariableEncoding(["u", "keys"], channels=3, spatial_dims=1, modes=2)
    before = enc(["u", "keys"], (16,)).detach()
    params = enc.add_variable("p")
    assert enc.names == ["u", "keys", "p"] and sum(p.numel() for p in params) == 2 * 3 * 3
    torch.testing.assert_close(enc(["keys", "u"], (16,)), before.flip(0))
    assert not torch.allclose(enc(["p"], (16,))[0], before[0])
    with pytest.raises(ValueError, match=r"name: expected a new variable, got 'u'"):
        enc.add_variable("u")
    with pytest.raises(ValueError, match=r"name: expected a non-empty string without '\.', got 'a\.b'"):
        enc.add_variable("a.b")
    with pytest.raises(ValueError, match=r"variables: expected names from \['u', 'keys', 'p'\], got unknown \['T'\]"):
        enc(["u", "T"], (8,))


def test_a_variable_added_like_another_starts_as_an_independent_copy():
    enc = VariableEncoding(["u", "w"], channels=3, spatial_dims=2, modes=2)
    enc.add_variable("theta", like="w")
    torch.testing.assert_close(enc(["theta"], (8, 8)), enc(["w"], (8, 8)), rtol=0, atol=0)
    with torch.no_grad():
        enc.field("theta").cos.add_(1.0)  # trained apart from then on: w keeps its values
    assert not torch.allclose(enc(["theta"], (8, 8)), enc(["w"], (8, 8)))
    assert enc.field("w").cos.data_ptr() != enc.field("theta").cos.data_ptr()
    with pytest.raises(ValueError, match=r"like: expected None or a known variable from \['u', 'w', 'theta'\], got 'T'"):
        enc.add_variable("p", like="T")
    assert enc.names == ["u", "w", "theta"]  # the refused call added nothing
