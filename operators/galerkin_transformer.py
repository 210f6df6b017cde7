"""Galerkin Transformer (Cao, NeurIPS 2021, arXiv 2105.14995) on grids and point sets.

Architecture, for an input ``a`` with coordinates ``x``::

    a   = Restrict(a)                                      optional: onto a fixed latent grid
    h_0 = Conv([Lift([a, x])])                             pointwise lift, optional 3×3 conv blocks
    h_l = h_{l-1} + Attn(h_{l-1}, x)                       Galerkin / Fourier attention
    h_l = h_l + FFN(h_l)                                   Linear -> GELU -> Linear
    u   = Regressor(h_L)                                   spectral (grids) or pointwise

The regressor is the paper's spectral one on grids — ``regressor_layers`` blocks of
``SiLU(SpectralConv(h) + W h)`` (neuraloperator's :class:`SpectralConv`) followed by a pointwise
MLP — or a pointwise MLP (required on point sets). Every piece is either pointwise, a
quadrature-weighted integral or a truncated Fourier series, so a model trained at one
resolution evaluates at any other.

Shapes:
    grid input: ``x`` of shape ``(B, C_in, *spatial)`` with ``spatial_dims`` axes, returns
    ``(B, C_out, *spatial)``; point input: ``x`` of shape ``(B, N, C_in)`` with ``pos``
    ``(B, N, d)``, optional ``weights`` ``(B, N)`` and ``mask`` ``(B, N)``, returns
    ``(B, N, C_out)`` (zeros on padding).
"""

from __future__ import annotations

import torch
from torch import nn

from sciattn._checks import (
    check_choice,
    check_dim,
    check_finite,
    check_input_dtype,
    check_min_grid,
    check_positive_int,
    check_rank,
)
from sciattn.domain import Grid, PointCloud, fourier_resample, resample_field
from sciattn.galerkin import GalerkinAttention

from .contract import ExportPolicy, Operator
from .registry import register_operator

__all__ = ["GalerkinTransformer"]


class _EncoderLayer(nn.Module):
    """Post-residual encoder block of the paper: attention then a feed-forward network."""

    def __init__(self, d_model, n_heads, dim_ff, attention_type, pos_dim, dropout, ffn_dropout, norm_eps,
                 xavier_gain, diagonal_weight):
        super().__init__()
        self.attn = GalerkinAttention(
            d_model, n_heads, attention_type=attention_type, pos_dim=pos_dim, norm_eps=norm_eps,
            xavier_gain=xavier_gain, diagonal_weight=diagonal_weight, dropout=dropout,
        )
        self.ffn = nn.Sequential(
            nn.Linear(d_model, dim_ff), nn.GELU(), nn.Dropout(ffn_dropout), nn.Linear(dim_ff, d_model)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, h, pos, weights, mask):
        h = h + self.attn(h, pos, weights=weights, mask=mask)
        return h + self.dropout(self.ffn(h))


class _ConvFeatures(nn.Module):
    """Residual 3×3 convolution blocks on the latent grid (Cao's CNN feature extractor), ``(B, C, *latent)``."""

    def __init__(self, channels: int, n_blocks: int, spatial_dims: int):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[spatial_dims]
        self.blocks = nn.ModuleList(
            nn.Sequential(conv(channels, channels, 3, padding=1), nn.GELU(), conv(channels, channels, 3, padding=1))
            for _ in range(n_blocks)
        )
        self.act = nn.GELU()

    def forward(self, h):
        for block in self.blocks:
            h = self.act(h + block(h))
        return h


class _SpectralRegressor(nn.Module):
    """``L × SiLU(SpectralConv(h) + W h)`` then a pointwise MLP, on ``(B, C, *spatial)``.

    Band-limited, the last block has no bypass ``W``, so it has no ``skips`` entry (every parameter
    takes part in the loss, as ``DistributedDataParallel`` requires). Checkpoints written before
    that change hold the never-used last ``W``; loading drops it (:meth:`_drop_unused_skip`).
    """

    def __init__(self, d_model, width, out_channels, n_modes, n_layers, dim_ff, spatial_dims, band_limited):
        super().__init__()
        self.band_limited = band_limited
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[spatial_dims]
        self.lift = conv(d_model, width, 1)
        from neuralop.layers.spectral_convolution import SpectralConv  # slow to import: only when used

        self.spectral = nn.ModuleList(SpectralConv(width, width, n_modes=n_modes) for _ in range(n_layers))
        skips = [conv(width, width, 1) for _ in range(n_layers)]
        if band_limited:  # drawn, then dropped: every other weight keeps the initial value of earlier releases
            skips.pop()
        self.skips = nn.ModuleList(skips)
        self.head = nn.Sequential(conv(width, dim_ff, 1), nn.SiLU(), conv(dim_ff, out_channels, 1))
        self.act = nn.SiLU()
        if band_limited:
            self._register_load_state_dict_pre_hook(self._drop_unused_skip)

    def _drop_unused_skip(self, state_dict, prefix, *args) -> None:
        for k in (f"{prefix}skips.{len(self.skips)}.weight", f"{prefix}skips.{len(self.skips)}.bias"):
            state_dict.pop(k, None)

    def forward(self, h, output_shape=None):
        h = self.lift(h)
        last = len(self.spectral) - 1
        for i, spec in enumerate(self.spectral):
            if i == last and self.band_limited:
                # No pointwise bypass: a band-limited field, evaluated on the output grid by its
                # Fourier series (exact interpolation when the grids are nested).
                h = spec(h)
                if output_shape is not None:
                    h = fourier_resample(h, output_shape)
                h = self.act(h)
            else:
                h = self.act(spec(h) + self.skips[i](h))
        return self.head(h)


@register_operator("galerkin_transformer")
class GalerkinTransformer(Operator):
    """Galerkin Transformer neural operator.

    Args:
        in_channels: input channels ``C_in``.
        out_channels: output channels ``C_out``.
        spatial_dims: dimension ``d`` of the domain (1, 2 or 3).
        d_model: token width.
        n_layers: number of encoder blocks.
        n_heads: attention heads.
        dim_ff: hidden width of the feed-forward networks (default ``2·d_model``).
        attention_type: ``"galerkin"`` or ``"fourier"``.
        regressor: ``"spectral"`` (grids only, the paper's) or ``"pointwise"``.
        n_modes: Fourier modes per axis kept by the spectral regressor.
        regressor_width: channels of the spectral regressor.
        regressor_layers: spectral blocks in the regressor.
        band_limited_output: drop the pointwise bypass of the last spectral block, so the output is
            a pointwise function of a band-limited field. The same smooth function is then sampled
            at every resolution, instead of carrying the input's grid-scale jumps; this is what
            keeps zero-shot errors flat when a model trained at 32² is evaluated at 128².
        latent_resolution: run the attention stack on a fixed latent grid, as Cao's 2-D model does on
            its coarse grid. Inputs on other grids are resampled onto it (exact restriction for
            nested grids, multilinear otherwise); the regressor's last block is band-limited and
            is evaluated on the input grid through its Fourier series. ``None``: work on the
            input grid. Requires ``regressor="spectral"``.
        conv_blocks: residual 3×3 convolution blocks applied to the lifted input on the latent grid
            before the attention stack (the CNN feature extractor of Cao's 2-D model). Their
            stencil is fixed in latent cells, so they require ``latent_resolution``.
        dropout, ffn_dropout: dropout on attention/FFN outputs and inside the FFN.
        norm_eps, xavier_gain, diagonal_weight: attention LayerNorm eps and initialisation.
    """

    export_policy = ExportPolicy(
        multiple="its input is restricted onto the latent grid by slicing, exact when each size is a multiple of the "
                 "latent one; other sizes are interpolated in eager mode only")

    def __init__(
        self,
        *,
        in_channels: int,
        out_channels: int,
        spatial_dims: int = 2,
        d_model: int = 64,
        n_layers: int = 4,
        n_heads: int = 4,
        dim_ff: int | None = None,
        attention_type: str = "galerkin",
        regressor: str = "spectral",
        n_modes: int | list[int] = 8,
        regressor_width: int = 32,
        regressor_layers: int = 2,
        band_limited_output: bool = False,
        latent_resolution: int | list[int] | None = None,
        conv_blocks: int = 0,
        dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        norm_eps: float = 1e-5,
        xavier_gain: float = 1e-2,
        diagonal_weight: float = 1e-2,
    ) -> None:
        super().__init__()
        for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("d_model", d_model),
                            ("n_layers", n_layers), ("n_heads", n_heads), ("regressor_width", regressor_width)]:
            check_positive_int(name, value)
        if spatial_dims not in (1, 2, 3):
            raise ValueError(f"spatial_dims: expected 1, 2 or 3, got {spatial_dims!r}")
        check_choice("regressor", regressor, ("spectral", "pointwise"))
        self.in_channels, self.out_channels, self.spatial_dims = in_channels, out_channels, spatial_dims
        self.regressor_kind = regressor
        if latent_resolution is not None:
            latent = [latent_resolution] * spatial_dims if isinstance(latent_resolution, int) else list(latent_resolution)
            if len(latent) != spatial_dims or any(not isinstance(n, int) or n < 2 for n in latent):
                raise ValueError(f"latent_resolution: expected an int >= 2 or {spatial_dims} such ints, got {latent_resolution!r}")
            if regressor != "spectral":
                raise ValueError("latent_resolution: requires regressor='spectral', got regressor='pointwise'")
            band_limited_output = True
            self.latent_shape: tuple[int, ...] | None = tuple(latent)
        else:
            self.latent_shape = None
        if conv_blocks and self.latent_shape is None:
            raise ValueError(f"conv_blocks: requires latent_resolution (a fixed grid for the 3x3 stencils), got conv_blocks={conv_blocks} without it")
        self.features = _ConvFeatures(d_model, conv_blocks, spatial_dims) if conv_blocks else None
        dim_ff = dim_ff or 2 * d_model
        self.lift = nn.Linear(in_channels + spatial_dims, d_model)
        self.layers = nn.ModuleList(
            _EncoderLayer(d_model, n_heads, dim_ff, attention_type, spatial_dims, dropout, ffn_dropout, norm_eps,
                          xavier_gain, diagonal_weight)
            for _ in range(n_layers)
        )
        if regressor == "spectral":
            modes = [n_modes] * spatial_dims if isinstance(n_modes, int) else list(n_modes)
            if len(modes) != spatial_dims:
                raise ValueError(f"n_modes: expected an int or {spatial_dims} ints, got {n_modes!r}")
            self.regressor = _SpectralRegressor(d_model, regressor_width, out_channels, modes, regressor_layers,
                                                dim_ff, spatial_dims, band_limited_output)
        else:
            self.regressor = nn.Sequential(nn.Linear(d_model, dim_ff), nn.GELU(), nn.Linear(dim_ff, out_channels))

    @property
    def export_size_multiple(self) -> tuple[int, ...] | None:
        """Per-axis multiples of the spatial sizes a traced program (``sciattn export``) declares, or ``None``.

        With ``latent_resolution`` the input is restricted onto the latent grid by slicing when every size
        is a multiple of the latent one (and interpolated otherwise): declaring sizes ``m_k * K_k`` keeps
        that branch, and the step ``n_k // m_k``, symbolic, so one program takes every multiple.
        """
        return self.latent_shape

    def encode(self, a: torch.Tensor, pos: torch.Tensor, weights, mask, grid_shape=None) -> torch.Tensor:
        """Lift and run the attention stack on tokens ``(B, N, C_in)`` -> ``(B, N, d_model)``."""
        if pos.dim() == 2:
            pos = pos.unsqueeze(0).expand(a.shape[0], *pos.shape)
        h = self.lift(torch.cat([a, pos.to(a.dtype)], dim=-1))
        if self.features is not None:
            b, n, c = h.shape
            h = self.features(h.transpose(1, 2).reshape(b, c, *grid_shape)).reshape(b, c, n).transpose(1, 2)
        for layer in self.layers:
            h = layer(h, pos, weights, mask)
        return h

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor | None = None,
        weights: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        y: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``y`` is accepted and ignored, so neuraloperator's ``Trainer`` (which calls
        ``model(**sample)`` with the target in the sample) trains this model unchanged."""
        del y
        if pos is None:
            return self._forward_grid(x)
        return self._forward_points(x, pos, weights, mask)

    def _forward_grid(self, x: torch.Tensor) -> torch.Tensor:
        d = self.spatial_dims
        check_rank("x", x, 2 + d, f"(B, C_in={self.in_channels}, {d} spatial axes)")
        check_dim("x", x, 1, self.in_channels, "input channels")
        check_input_dtype("x", x, self, "operator")
        check_min_grid("x", x, "the Galerkin Transformer",
                       "one node per axis has no spacing: its coordinates and quadrature weights are undefined")
        check_finite("x", x)
        out_shape = tuple(x.shape[2:])
        if self.latent_shape is not None:
            x = resample_field(x, self.latent_shape)
        grid = Grid.from_field(x, d)
        nodes, weights = grid.nodes_and_weights(x.dtype, x.device)
        b = x.shape[0]
        tokens = x.flatten(2).transpose(1, 2)
        h = self.encode(tokens, nodes, weights, None, grid.shape)
        if self.regressor_kind == "spectral":
            latent = h.transpose(1, 2).reshape(b, -1, *grid.shape)
            return self.regressor(latent, output_shape=out_shape if self.latent_shape is not None else None)
        return self.regressor(h).transpose(1, 2).reshape(b, self.out_channels, *grid.shape)

    def _forward_points(self, x, pos, weights, mask) -> torch.Tensor:
        if self.regressor_kind == "spectral":
            raise ValueError(
                "pos: point-set input needs regressor='pointwise'; this model was built with regressor='spectral', "
                "which requires grid input (B, C, *spatial) without pos"
            )
        check_rank("x", x, 3, f"(B, N, C_in={self.in_channels})")
        check_dim("x", x, -1, self.in_channels, "input channels")
        cloud = PointCloud(pos, weights, mask)
        if cloud.ndim != self.spatial_dims:
            raise ValueError(f"pos: expected {self.spatial_dims} coordinates per point, got {cloud.ndim}")
        if x.shape[:2] != pos.shape[:2]:
            raise ValueError(f"x: expected (B, N) = {tuple(pos.shape[:2])} to match pos, got {tuple(x.shape[:2])}")
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x, None if mask is None else mask[..., None])
        if mask is not None:
            x = torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))
            pos = torch.where(mask[..., None], pos, torch.zeros((), dtype=pos.dtype, device=pos.device))
        h = self.encode(x, pos, weights, mask)
        out = self.regressor(h)
        if mask is not None:
            out = torch.where(mask[..., None], out, torch.zeros((), dtype=out.dtype, device=out.device))
        return out
