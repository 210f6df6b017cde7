"""The models of ``benchmarks/pointcloud_accuracy.py`` (a helper module: it imports torch and sciattn, so the
benchmark imports it inside its ``run``): the script-local full-attention baseline (:class:`DenseTransformer`), the
timing-only Galerkin block, and the four models of about 70 k parameters each (:func:`make_models`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sciattn.galerkin import GalerkinAttention
from sciattn.operators import create_operator
from sciattn.operators.erwin import SwiGLU, point_embedding
from sciattn.weighted_softmax import weighted_softmax_attention

WIDTH, HEADS, DEPTH, MLP, BALL, BLOCK, TOP_K = 32, 4, 4, 4, 64, 8, 4
MODELS = ("Full attention", "BSA", "Erwin", "Galerkin Transformer")


class DenseAttention(nn.Module):
    """Global softmax attention with key quadrature weights: ``z_i = Σ_j w_j e^{q_i·k_j/√D} v_j / Σ_j w_j e^{...}``.

    Shapes: ``h (B, N, C)``, ``weights (B, N)`` -> ``(B, N, C)``.
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        b, n, c = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        z = weighted_softmax_attention(q, k, v, weights)
        return self.proj(z.transpose(1, 2).reshape(b, n, c))


class DenseBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn, self.mlp = DenseAttention(dim, heads), SwiGLU(dim, mlp_ratio * dim)

    def forward(self, h, weights):
        h = h + self.attn(self.norm1(h), weights)
        return h + self.mlp(self.norm2(h))


class DenseTransformer(nn.Module):
    """``Embed([a, p])`` -> ``depth`` x DenseBlock -> ``Linear(RMSNorm h)``: BSATransformer with dense attention."""

    def __init__(self, in_channels, out_channels, spatial_dims, width, depth, heads, mlp_ratio) -> None:
        super().__init__()
        self.embed = point_embedding(in_channels, spatial_dims, width)
        self.blocks = nn.ModuleList(DenseBlock(width, heads, mlp_ratio) for _ in range(depth))
        self.norm, self.head = nn.RMSNorm(width), nn.Linear(width, out_channels)

    def forward(self, x, pos, weights=None):
        h = self.embed(torch.cat([x, pos], dim=-1))
        for blk in self.blocks:
            h = blk(h, weights)
        return self.head(self.norm(h))


class GalerkinBlock(nn.Module):
    """Timing only: ``h + Galerkin(h)`` then ``h + FFN(h)`` (the Galerkin Transformer's encoder layer)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.attn = GalerkinAttention(dim, heads, pos_dim=2)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, h, pos, weights):
        h = h + self.attn(h, pos, weights=weights)
        return h + self.ffn(h)


def make_models(cin: int, d: int) -> dict[str, Callable[[], nn.Module]]:
    """Factories of the four models of :data:`MODELS`, about 70 k parameters each (the rows record the counts)."""
    ops = {
        "Full attention": lambda: DenseTransformer(cin, 1, d, WIDTH, DEPTH, HEADS, MLP),
        "BSA": lambda: create_operator("bsa_transformer", in_channels=cin, out_channels=1, spatial_dims=d, width=WIDTH,
                                       depth=DEPTH, n_heads=HEADS, ball_size=BALL, block_size=BLOCK, top_k=TOP_K,
                                       mlp_ratio=MLP),
        "Erwin": lambda: create_operator("erwin", in_channels=cin, out_channels=1, spatial_dims=d, c_hidden=(16, 24, 32),
                                         ball_sizes=(BALL,) * 3, enc_depths=(2, 2, 2), dec_depths=(1, 1), strides=(4, 4),
                                         n_heads=HEADS, mlp_ratio=3),
        "Galerkin Transformer": lambda: create_operator("galerkin_transformer", in_channels=cin, out_channels=1,
                                                        spatial_dims=d, d_model=44, n_layers=DEPTH, n_heads=HEADS,
                                                        dim_ff=88, regressor="pointwise"),
    }
    return ops


def run_model(name, model, x, pos, w):
    """``model``'s prediction at the points ``pos`` with quadrature weights ``w`` (the Galerkin Transformer takes them
    positionally)."""
    if name == "Galerkin Transformer":
        return model(x, pos, w)
    return model(x, pos, weights=w)
