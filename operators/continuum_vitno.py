"""ViT neural operator: patched continuum attention (Calvello, Kovachki, Levine, Stuart, arXiv 2406.06486).

We follow the authors' code (EdoardoCalvello/TransformerNeuralOperators @ a546ae0: ``models/ViTNO/ViTNO_pytorch.py``
``SimpleEncoder``, with ``TransformerEncoderLayer_ViTNO``, ``MultiheadAttention_ViTNO``,
``ScaledDotProductAttention_ViTNO``, ``SpectralConv2d_in`` and ``SpectralConv2d`` of ``models/transformer_custom.py``;
the settings of ``paper_run_scripts/2d_experiments_ViTNO``).

The domain ``[0, 1]²`` is cut into square patches ``Ω_a``; each token is a *function* on its patch, ``h_a(ξ) =
h(x_a + ξ)`` for ``ξ`` in the reference patch. Attention between patches takes the L² inner product over the patch::

    s_ab = ∫_{Ω_0} <q_a(ξ), k_b(ξ)> dξ ≈ Σ_ξ w_ξ <q_a(ξ), k_b(ξ)>        (per head, no 1/sqrt(d_k))
    A(h)_a(ξ) = Σ_b |Ω_b| e^{s_ab} v_b(ξ) / Σ_b |Ω_b| e^{s_ab}

with ``q, k, v`` pointwise Linear maps and ``w_ξ`` the grid's quadrature weights (normalised to sum to one over the
domain: the published ``1 / im_size²``). It is computed by :func:`sciattn.weighted_softmax_attention` on tokens
``sqrt(w_ξ) q_a(ξ)`` flattened over ``ξ`` (logit scale 1) and patch weights ``|Ω_b|``. The network::

    h = SpecConv_patch([a, x]);   per layer (post-norm):  h <- LN1(h + W_o A(h));  h <- LN2(h + FFN(h))
    u = Lin(h) + SpecConv(Lin(h))                 (the published output "smoothing", an FNO layer over the domain)

``SpecConv_patch`` is an FNO spectral convolution applied to each patch separately (``rfft2`` over the patch, modes
``modes`` kept, no bias, no pointwise term), the published ``SpectralConv2d_in``.

Patches. The published constructor takes ``patch_size`` in grid points at one ``im_size``; changing resolution
means calling ``set_im_size(new_im_size, new_patch_size)`` by hand (the paper keeps 13 x 13 patches by scaling the
patch with the grid). Here ``patches`` (the default, 4 per axis) fixes the patches' physical size, so the operator
is the same at every resolution; ``patch_size`` (points) is the published form: the patches shrink as the grid is
refined (docs page ``docs/operators/continuum_vitno.md``, refinement rows). Spectral modes that a grid cannot hold
are left out (the published code raises there), so the same frequencies carry the same weights at every resolution.

Shapes: ``x`` ``(B, C_in, H, W)`` -> ``(B, C_out, H, W)``; ``H`` and ``W`` multiples of ``patches`` (or of
``patch_size``).
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn import weighted_softmax_attention
from sciattn._checks import check_per_axis_ints, check_positive_int
from sciattn.domain import Grid

from ._token_inputs import check_grid_input
from .continuum_transformer import PostNormBlock, check_encoder_args
from .contract import ExportPolicy, Operator
from .registry import register_operator

__all__ = ["ContinuumViTNO", "SpectralConv2d"]


def _kept(n: int, modes: int) -> tuple[int, int]:
    """How many non-negative and negative frequencies of ``modes`` a length-``n`` DFT axis holds."""
    return min(modes, (n + 1) // 2), min(modes, n // 2)


class SpectralConv2d(nn.Module):
    """``u -> irfft2(W · rfft2(u))`` over the last two axes, keeping frequencies ``-m1 <= k1 < m1``, ``0 <= k2 < m2``
    (published ``SpectralConv2d``: ``weights1`` for ``k1 >= 0``, ``weights2`` for ``k1 < 0``; stored as real pairs,
    the published DDP layout, and drawn as published: ``(U[0,1) + i U[0,1)) / (C_in C_out)``).

    Shapes: ``(..., C_in, n1, n2)`` -> ``(..., C_out, n1, n2)``."""

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, int]):
        super().__init__()
        self.modes = modes
        scale = 1.0 / (in_channels * out_channels)
        self.weights1 = nn.Parameter(scale * torch.rand(in_channels, out_channels, *modes, 2))
        self.weights2 = nn.Parameter(scale * torch.rand(in_channels, out_channels, *modes, 2))
        self.out_channels = out_channels

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        n1, n2 = u.shape[-2:]
        m1, m2 = self.modes
        pos, neg = _kept(n1, m1)
        k2 = min(m2, n2 // 2 + 1)
        w1, w2 = torch.view_as_complex(self.weights1), torch.view_as_complex(self.weights2)
        u_ft = torch.fft.rfft2(u)
        out = u_ft.new_zeros(*u.shape[:-3], self.out_channels, n1, n2 // 2 + 1)
        out[..., :pos, :k2] = torch.einsum("...ixy,ioxy->...oxy", u_ft[..., :pos, :k2], w1[:, :, :pos, :k2])
        if neg:
            out[..., n1 - neg:, :k2] = torch.einsum("...ixy,ioxy->...oxy", u_ft[..., n1 - neg:, :k2],
                                                    w2[:, :, m1 - neg:, :k2])
        return torch.fft.irfft2(out, s=(n1, n2))


class PatchAttention(nn.Module):
    """Published ``MultiheadAttention_ViTNO``: pointwise ``W_q, W_k, W_v`` split into heads with the head index last
    (channel ``i H + h``), the patch attention of the module docstring per head, heads merged back, ``W_o``."""

    def __init__(self, width: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

    def forward(self, h: torch.Tensor, sqrt_w: torch.Tensor, patch_w: torch.Tensor) -> torch.Tensor:
        """``h`` ``(B, P, p1, p2, width)``, ``sqrt_w`` ``(p1, p2)`` (``sqrt`` of the node weights; equal in every
        patch), ``patch_w`` ``(B, P)`` -> ``(B, P, p1, p2, width)``."""
        b, n_p, p1, p2, c = h.shape
        heads = self.n_heads

        def split(t):  # (B, P, p1, p2, d_k, H) -> (B, H, P, p1 p2 d_k)
            return t.reshape(b, n_p, p1, p2, c // heads, heads).permute(0, 5, 1, 2, 3, 4).reshape(b, heads, n_p, -1)

        s = sqrt_w[:, :, None]
        q, k, v = split(self.q(h) * s), split(self.k(h) * s), split(self.v(h))
        z = weighted_softmax_attention(q, k, v, weights=patch_w, scale=1.0)  # (B, H, P, p1 p2 d_k)
        z = z.reshape(b, heads, n_p, p1, p2, c // heads).permute(0, 2, 3, 4, 5, 1).reshape(b, n_p, p1, p2, c)
        return self.o(z)


@register_operator("continuum_vitno")
class ContinuumViTNO(Operator):
    """ViT neural operator (ViTNO): continuum attention between patches, each patch a function (2-D grids).

    Args:
        in_channels: input channels ``C_in`` (the coordinates are appended).
        out_channels: output channels ``C_out``.
        width: ``d_model`` (run scripts 32, 64, 96).
        n_layers: encoder layers (run scripts 6).
        n_heads: attention heads (run scripts 8), dividing ``width``.
        dim_ff: hidden width of the feed-forward networks (run scripts 128).
        patches: patches per axis, of fixed physical size ``1/patches`` (the default, 4; the paper's 13 x 13).
        patch_size: patch side in grid points, the published form (``patches`` must then be ``None``).
        modes: Fourier modes of the per-patch lift, an int or one per axis (run scripts ``(9, 9)`` at 32-point
            patches).
        smoothing_modes: Fourier modes per axis of the output smoothing layer (run scripts 64 at 416²); 0: none.
        activation: ``"gelu"`` (run scripts) or ``"relu"``.
        dropout: dropout in the encoder layers (run scripts 1e-4; 0 by default).
        norm_eps: LayerNorm epsilon.
    """

    input_kind = "grid"
    export_policy = ExportPolicy(multiple="the grid is cut into whole patches (patches per axis, or patch_size points)")

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        width: int = 32,
        n_layers: int = 2,
        n_heads: int = 4,
        dim_ff: int = 64,
        patches: int | None = 4,
        patch_size: int | None = None,
        modes: int | tuple[int, int] | list[int] = 4,
        smoothing_modes: int = 12,
        activation: str = "gelu",
        dropout: float = 0.0,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_encoder_args(in_channels=in_channels, out_channels=out_channels, width=width, n_layers=n_layers,
                           n_heads=n_heads, dim_ff=dim_ff, activation=activation, dropout=dropout)
        if (patches is None) == (patch_size is None):
            raise ValueError(f"patches, patch_size: expected exactly one of them (patches per axis of fixed physical "
                             f"size, or the published patch side in grid points), got patches={patches!r}, "
                             f"patch_size={patch_size!r}")
        if patches is not None:
            check_positive_int("patches", patches)
        else:
            check_positive_int("patch_size", patch_size)
        modes = check_per_axis_ints("modes", modes, 2)
        if isinstance(smoothing_modes, bool) or not isinstance(smoothing_modes, int) or smoothing_modes < 0:
            raise ValueError(f"smoothing_modes: expected an int >= 0, got {smoothing_modes!r}")
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, 2
        self.patches, self.patch_size = patches, patch_size
        self.lift = SpectralConv2d(in_channels + 2, width, tuple(modes))
        self.blocks = nn.ModuleList(PostNormBlock(PatchAttention(width, n_heads), width, dim_ff, activation, dropout,
                                                  norm_eps, ffn_dropout=True) for _ in range(n_layers))
        self.head = nn.Linear(width, out_channels)
        self.smoothing = SpectralConv2d(out_channels, out_channels, (smoothing_modes,) * 2) if smoothing_modes else None

    @property
    def export_size_multiple(self) -> int:
        return self.patches if self.patches is not None else self.patch_size

    @property
    def export_size_range(self) -> list[tuple[int, None]]:
        """Sizes at which every spectral mode is held (a traced program then takes one branch at every size): patches
        of at least ``2 max(modes)`` points (physical form; the published form's patches are fixed) and at least
        ``2 smoothing_modes`` points per axis."""
        k = self.export_size_multiple
        lo = self.patches * 2 * max(self.lift.modes) if self.patches is not None else k
        if self.smoothing is not None:
            lo = max(lo, 2 * self.smoothing.modes[0])
        return [(-(-lo // k) * k, None)] * 2

    def patch_grid(self, shape: tuple[int, int]) -> tuple[int, int, int, int]:
        """``(P1, P2, p1, p2)``: patches per axis and points per patch side on a grid of ``shape``."""
        k = self.export_size_multiple
        for axis, n in enumerate(shape):
            if n % k:
                what = (f"a multiple of patches={k} (patches of fixed physical size)" if self.patches is not None
                        else f"a multiple of patch_size={k} (points per patch side)")
                raise ValueError(f"x: expected spatial size {axis} to be {what}, got {n} (shape {tuple(shape)})")
        if self.patches is not None:
            return k, k, shape[0] // k, shape[1] // k
        return shape[0] // k, shape[1] // k, k, k

    def forward(self, x: torch.Tensor, *, y=None) -> torch.Tensor:
        """``y`` is accepted and ignored (neuraloperator's ``Trainer`` calls ``model(**sample)``)."""
        del y
        grid = check_grid_input(self, x, "ContinuumViTNO")
        n1, n2 = grid.shape
        P1, P2, p1, p2 = self.patch_grid((n1, n2))
        b = x.shape[0]
        nodes, w = Grid(grid.shape).nodes_and_weights(x.dtype, x.device)
        w = (w / w.sum()).reshape(n1, n2)
        coords = nodes.T.reshape(2, n1, n2).expand(b, 2, n1, n2)
        u = torch.cat([x, coords], dim=1)  # (B, C, n1, n2) -> patches (B, P, C, p1, p2), patch index P1-major

        def chop(t):
            c = t.shape[1]
            return t.reshape(b, c, P1, p1, P2, p2).permute(0, 2, 4, 1, 3, 5).reshape(b, P1 * P2, c, p1, p2)

        h = self.lift(chop(u)).permute(0, 1, 3, 4, 2)  # (B, P, p1, p2, width)
        w_patch = chop(w.expand(b, 1, n1, n2))[:, :, 0]  # (B, P, p1, p2)
        sqrt_w = w_patch[0, 0].sqrt()  # equal in every patch on a uniform grid
        patch_w = w_patch.sum(dim=(2, 3))
        for block in self.blocks:
            h = block(h, sqrt_w, patch_w)
        out = self.head(h)  # (B, P, p1, p2, C_out) -> (B, C_out, n1, n2)
        out = out.reshape(b, P1, P2, p1, p2, -1).permute(0, 5, 1, 3, 2, 4).reshape(b, -1, n1, n2)
        if self.smoothing is not None:
            out = out + self.smoothing(out)
        return out
