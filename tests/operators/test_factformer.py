"""FactFormer (operators/factformer.py) against a from-scratch transcription of the published equations (the bare
axial sums and a uniform GroupNorm), resolution behaviour and input checks."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import sciattn.operators.factformer  # noqa: F401  (registers "factformer")
from sciattn.operators import create_operator

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _token_checks as tc  # noqa: E402

CFG = dict(in_channels=2, out_channels=3, width=8, n_layers=2, n_heads=2, dim_head=4, latent_width=6,
           kernel_multiplier=2, rope_scale=5.0, rff_features=4,
           variant="sciattn_v1")  # the transcription below is of the earlier layout (published: test_published_forwards.py)


def _model(spatial_dims=2, **change):
    torch.manual_seed(0)
    model = create_operator("factformer", spatial_dims=spatial_dims, **{**CFG, **change}).double()
    with torch.no_grad():  # larger kernels than the 0.02-gain init, so GroupNorm's eps is negligible and it normalises
        for name, p in model.named_parameters():
            if name.endswith((".q.weight", ".k.weight")):
                p.normal_(0, 0.5)
    return model


# ----------------------------------------------------------------------------- transcription of the paper's maths
_lin, _gelu = tc.lin, tc.gelu


def _ln(p, name, x):
    var, mu = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return (x - mu) / torch.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _rope(t, pos, s):
    """pairs (c, c + m/2) as complex numbers times exp(i s p 10000^{-2k/m})"""
    half = t.shape[-1] // 2
    k = torch.arange(half, dtype=t.dtype)
    z = torch.complex(t[..., :half], t[..., half:2 * half]) * torch.exp(1j * s * pos[:, None] * 10000.0 ** (-k / half))
    return torch.cat([z.real, z.imag], -1)


def reference_factformer(p, a, cfg):
    """The published FactFormer: axial kernels κ = q kᵀ summed over each axis WITHOUT 1/n, then a uniform GroupNorm
    per head with eps; ours equals it with that eps scaled by N² (GroupNorm is scale-invariant)."""
    d = a.dim() - 2
    shape = a.shape[2:]
    n_pts = math.prod(shape)
    heads, dh, km = cfg["n_heads"], cfg["dim_head"], cfg["kernel_multiplier"]
    coords = [torch.arange(n, dtype=a.dtype) / n for n in shape]
    mesh = torch.stack(torch.meshgrid(*coords, indexing="ij"), -1)
    phase = 2 * math.pi * mesh @ p["rff_freqs"]
    rff = torch.cat([phase.cos(), phase.sin()], -1)
    u = _lin(p, "lift", a.movedim(1, -1))
    for layer in range(cfg["n_layers"]):
        b = f"blocks.{layer}"
        u = u + _lin(p, f"pos_lifts.{layer}", rff)
        un = _ln(p, f"{b}.ln", u)
        v = _lin(p, f"{b}.to_v", un, bias=False).reshape(*u.shape[:-1], heads, dh)
        ui = _lin(p, f"{b}.to_in", un, bias=False)
        for ax in range(d):
            kn = f"{b}.kernels.{ax}"
            h = _lin(p, f"{kn}.proj", ui, bias=False)
            for other in sorted((o for o in range(d) if o != ax), reverse=True):
                h = h.sum(1 + other) / shape[other]
            phi = _lin(p, f"{kn}.mlp.2", _gelu(_lin(p, f"{kn}.mlp.0", _ln(p, f"{kn}.ln", h))))
            q = _lin(p, f"{kn}.q", phi, bias=False).reshape(*phi.shape[:2], heads, dh * km)
            k = _lin(p, f"{kn}.k", phi, bias=False).reshape(*phi.shape[:2], heads, dh * km)
            q, k = _rope(q.movedim(1, -2), coords[ax], cfg["rope_scale"]), _rope(k.movedim(1, -2), coords[ax],
                                                                                 cfg["rope_scale"])
            kernel = q @ k.transpose(-1, -2)                                  # (B, H, n_a, n_a), bare
            vm = v.movedim(1 + ax, -1)                                        # (B, ..., H, d, n_a)
            out = torch.zeros_like(vm)
            for i in range(shape[ax]):                                        # Σ_j κ(x_i, y_j) V(y_j)
                out[..., i] = (kernel[:, :, i, :].reshape(kernel.shape[0], *([1] * (d - 1)), heads, 1, -1) * vm).sum(-1)
            v = out.movedim(-1, 1 + ax)
        dims = tuple(range(1, d + 1)) + (d + 2,)
        var, mu = torch.var_mean(v, dim=dims, keepdim=True, unbiased=False)
        v = (v - mu) / torch.sqrt(var + 1e-8 * n_pts ** 2)
        u = _lin(p, f"{b}.out.2", _gelu(_lin(p, f"{b}.out.0", v.flatten(-2)))) + u
    return _lin(p, "head.2", _gelu(_lin(p, "head.0", u))).movedim(-1, 1)


@pytest.mark.parametrize("shape", [(7,), (6, 5), (4, 3, 5)])
def test_equals_the_published_layer_with_its_eps_scaled(shape):
    model = _model(len(shape))
    a = torch.randn(2, 2, *shape, dtype=torch.float64)
    ref = reference_factformer(dict(model.state_dict()), a, CFG)
    out = model(a).detach()
    assert out.shape == (2, 3, *shape)
    assert float((out - ref).abs().max()) <= 1e-10 * float(ref.abs().max())


def test_gradients_finite_and_reach_every_parameter():
    model = _model()
    out = model(torch.randn(2, 2, 6, 6, dtype=torch.float64))
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_bad_inputs_name_the_argument():
    model = _model()
    with pytest.raises(ValueError, match="x: expected"):
        model(torch.randn(2, 2, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="x: FactFormer needs at least 2 points along every spatial axis"):
        model(torch.randn(1, 2, 1, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="x: expected dtype torch.float64"):
        model(torch.randn(1, 2, 8, 8))
    with pytest.raises(ValueError, match="rope_scale: expected a finite number"):
        create_operator("factformer", in_channels=1, out_channels=1, rope_scale=float("inf"))
    with pytest.raises(ValueError, match="spatial_dims: expected 1, 2 or 3, got 0"):
        create_operator("factformer", in_channels=1, out_channels=1, spatial_dims=0)


@pytest.mark.slow
def test_default_config_converges_under_grid_refinement():
    tc.check_default_config_converges("factformer")
