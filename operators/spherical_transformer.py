"""Spherical transformer (after Bonev et al., 2025, "Attention on the sphere") and its planar baseline.

Architecture, for an input ``a`` on the ``nlat × nlon`` grid and the internal grid
``h × w = ((nlat − 1)//s + 1) × (nlon/s)`` (``s`` = ``scale_factor``)::

    z   = Lift(a)                                        pointwise MLP, C_in -> E, input grid
    h_0 = R↓ z + A↓(R↓ N(z), N(z)) + P                  encoder: resampled query, attention down to h × w
    h_l = h_{l-1} + A_l(N(h_{l-1}));  h_l += MLP(N(h_l))  pre-norm attention blocks on h × w
    g   = R↑ h_L + A↑(R↑ N(h_L), N(h_L))                 decoder: attention up to the input grid
    u   = Proj(N(g))  (+ a with residual_prediction)     pointwise MLP, E -> C_out

``R↓``/``R↑`` interpolate fields between grids (queries of the resampling attentions), ``N`` is a
LayerNorm over channels, ``P`` a fixed positional embedding, ``A↓``/``A↑`` neighbourhood attentions
between the grids (in both variants: local resampling, like the DISCO encoder/decoder of the paper),
and ``A_l`` global or neighbourhood attention on the internal grid.

* :class:`SphericalTransformer`: area-weighted quadrature attention (:mod:`sciattn.spherical`) with
  geodesic discs, periodic-in-longitude interpolation, zonal Legendre polynomials of latitude as ``P`` (so the
  whole model commutes with longitude shifts, the symmetry of a rotating sphere). The
  internal neighbourhood radius defaults to ``(7/√π)·Δθ`` (a disc with the area of a 7×7 window of
  the internal grid's largest latitude spacing ``Δθ``); the encoder/decoder radius is one latitude
  spacing of the coarser grid.
* :class:`PlanarTransformer`: the same blocks and parameter count, but the grid is a flat image:
  uniform key weights, Euclidean discs in pixel units (no wrap-around, no pole geometry), image
  bilinear resampling and a 2-D sine–cosine ``P``.

Both run only on the grid they were built for (the neighbourhood indices and the quadrature are
built for it); another grid raises a ``ValueError``.

Shapes: ``x`` ``(B, C_in, nlat, nlon)`` -> ``(B, C_out, nlat, nlon)``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy import special
from torch import nn

from sciattn._checks import (
    check_choice,
    check_dim,
    check_finite,
    check_input_dtype,
    check_positive_int,
    check_rank,
)
from sciattn.domain import SphereGrid
from sciattn.neighborhood import neighborhood_attention
from sciattn.quadrature import SPHERE_GRIDS
from sciattn.spherical import SphereResample, SphericalAttention, SphericalNeighborhoodAttention
from sciattn.spherical.module import _ProjectedAttention
from sciattn.spherical.neighborhoods import latitude_spacing
from sciattn.weighted_softmax import weighted_softmax_attention

from .registry import register_operator

__all__ = ["PlanarTransformer", "SphericalTransformer", "planar_disc_csr", "zonal_legendre_embedding"]

ATTENTIONS = ("global", "neighborhood")
DISC_AREA_FACTOR = 7.0 / math.sqrt(math.pi)  # π r² = 49 Δ²: a disc with the area of a 7×7 window


class _ChannelNorm(nn.Module):
    """LayerNorm over the channels of ``(B, C, nlat, nlon)``."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, h):
        return self.norm(h.movedim(1, -1)).movedim(-1, 1)


def _mlp(c_in: int, hidden: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, hidden, 1), nn.GELU(), nn.Conv2d(hidden, c_out, 1))


class _Block(nn.Module):
    def __init__(self, attn: nn.Module, width: int, mlp_ratio: int):
        super().__init__()
        self.norm1, self.norm2 = _ChannelNorm(width), _ChannelNorm(width)
        self.attn, self.mlp = attn, _mlp(width, mlp_ratio * width, width)

    def forward(self, h):
        h = h + self.attn(self.norm1(h))
        return h + self.mlp(self.norm2(h))


class _Resampling(nn.Module):
    """``R(z) + A(R(N(z)), N(z))``: attention from one grid to another with an interpolated query."""

    def __init__(self, attn: nn.Module, resample: nn.Module, width: int):
        super().__init__()
        self.norm, self.attn, self.resample = _ChannelNorm(width), attn, resample

    def forward(self, z):
        n = self.norm(z)
        return self.resample(z) + self.attn(self.resample(n), n)


def spherical_harmonic_embedding(nlat: int, nlon: int, grid: str, channels: int) -> torch.Tensor:
    """Real spherical harmonics ``Y_l^m`` in the order ``(0,0), (1,-1), (1,0), (1,1), (2,-2), ...``
    (``P_l^m(cos θ) cos mλ`` for ``m ≥ 0``, ``P_l^{|m|}(cos θ) sin |m|λ`` for ``m < 0``, without the
    Condon–Shortley phase), each scaled to max 1 on the grid: ``(1, C, nlat, nlon)``."""
    sg = SphereGrid(nlat, nlon, grid)
    theta, lam = np.meshgrid(sg.colatitudes().numpy(), sg.longitudes().numpy(), indexing="ij")
    out = np.zeros((channels, nlat, nlon))
    for i in range(channels):
        degree = math.isqrt(i)
        order = i - degree * degree - degree
        y = (-1) ** order * special.sph_harm_y(degree, abs(order), theta, lam)  # no Condon–Shortley phase
        field = y.real if order >= 0 else y.imag
        peak = np.abs(field).max()
        out[i] = field / peak if peak > 1e-12 else 0.0
    return torch.as_tensor(out, dtype=torch.float32)[None]


def zonal_legendre_embedding(nlat: int, nlon: int, grid: str, channels: int) -> torch.Tensor:
    """Legendre polynomials ``P_l(cos θ)``, ``l = 0, 1, …``, each scaled to max 1 on the grid:
    ``(1, C, nlat, nlon)``, constant along longitude.

    The zonal spherical harmonics: functions of latitude only, so a model that adds them commutes
    with every longitude shift of its layers. That is the symmetry of flow on a rotating sphere
    (the Coriolis parameter ``f = 2Ω cos θ`` depends on latitude alone). Only ``nlat`` of them are
    distinct on ``nlat`` latitudes: channels ``l ≥ nlat`` are zero.
    """
    sg = SphereGrid(nlat, nlon, grid)
    cos_theta = np.cos(sg.colatitudes().numpy())
    out = np.zeros((channels, nlat))
    for degree in range(min(channels, nlat)):
        field = special.eval_legendre(degree, cos_theta)
        out[degree] = field / np.abs(field).max()
    return torch.as_tensor(out, dtype=torch.float32)[None, :, :, None].expand(1, channels, nlat, nlon).contiguous()


SPHERE_EMBEDDINGS = {  # pos_embed choices of SphericalTransformer
    "zonal": zonal_legendre_embedding,
    "spectral": spherical_harmonic_embedding,
    "none": lambda nlat, nlon, grid, channels: torch.zeros(1, channels, 1, 1),
}


def planar_sincos_embedding(nlat: int, nlon: int, channels: int) -> torch.Tensor:
    """2-D sine–cosine embedding of pixel indices (ViT/MAE style): ``(1, C, nlat, nlon)``."""
    n_freq = -(-channels // 4)
    omega = 1.0 / 10000 ** (torch.arange(n_freq, dtype=torch.float64) / n_freq)
    i, j = torch.meshgrid(torch.arange(nlat, dtype=torch.float64), torch.arange(nlon, dtype=torch.float64),
                          indexing="ij")
    feats = [f(omega[:, None, None] * c) for c in (i, j) for f in (torch.sin, torch.cos)]
    return torch.cat(feats)[:channels].float()[None]


def planar_disc_csr(in_shape, out_shape, radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR index of the input pixels whose centres lie within ``radius`` of each output pixel centre.

    Centres are ``(i + ½)·u/n`` per axis in units ``u`` of the coarser image's pixels; no wrap-around.
    Each output row is tested only against the input rows its disc can reach. Cached; do not modify
    the returned tensors in place.
    """
    return _planar_disc_csr(tuple(in_shape), tuple(out_shape), float(radius))


@functools.lru_cache(maxsize=16)
def _planar_disc_csr(in_shape, out_shape, radius):
    unit = (min(in_shape[0], out_shape[0]), min(in_shape[1], out_shape[1]))
    y_in, x_in = ((torch.arange(n, dtype=torch.float64) + 0.5) * u / n for n, u in zip(in_shape, unit))
    y_out, x_out = ((torch.arange(n, dtype=torch.float64) + 0.5) * u / n for n, u in zip(out_shape, unit))
    r2, reach = radius * radius * (1 + 1e-9), radius * (1 + 1e-9)
    # Candidate input columns per output column: a fixed window of offsets around the nearest one.
    scale = in_shape[1] / unit[1]
    half = math.ceil(reach * scale) + 1
    cand = torch.floor(x_out * scale).long()[:, None] + torch.arange(-half, half + 1)  # (nlon_out, 2·half+1)
    inside = (cand >= 0) & (cand < in_shape[1])
    cand = cand.clamp(0, in_shape[1] - 1)
    dx2 = torch.where(inside, (x_in[cand] - x_out[:, None]) ** 2, torch.full_like(x_in[cand], math.inf))
    counts, cols = [], []
    for y in y_out:
        band = ((y_in - y).abs() <= reach).nonzero().flatten()
        near = (y_in[band, None, None] - y) ** 2 + dx2[None] <= r2  # (band, nlon_out, window)
        near = near.transpose(0, 1)  # (nlon_out, band, window): output column first
        j, b, k = near.nonzero(as_tuple=True)
        counts.append(near.sum((1, 2)))
        cols.append(band.index_select(0, b) * in_shape[1] + cand.reshape(-1).index_select(0, j * cand.shape[1] + k))
    row_offsets = torch.zeros(out_shape[0] * out_shape[1] + 1, dtype=torch.int64)
    row_offsets[1:] = torch.cumsum(torch.cat(counts), 0)
    return row_offsets, torch.cat(cols)


class _PlanarAttention(_ProjectedAttention):
    """Softmax attention with uniform key weights on a flat image: global, or over Euclidean discs
    of ``radius`` pixels (:func:`planar_disc_csr`)."""

    def __init__(self, in_channels, n_heads, in_shape, out_shape=None, radius=None):
        super().__init__(in_channels, n_heads, in_shape, out_shape, None, None, True, None, None)
        self.radius = radius
        if radius is not None:
            row_offsets, col_indices = planar_disc_csr(self.in_shape, self.out_shape, radius)
            self.register_buffer("row_offsets", row_offsets, persistent=False)
            self.register_buffer("col_indices", col_indices, persistent=False)

    def _attend(self, q, k, v):
        if self.radius is None:
            return weighted_softmax_attention(q, k, v, scale=self.scale)
        return neighborhood_attention(q, k, v, self.row_offsets, self.col_indices, scale=self.scale, validate=False)


def _check_common(in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads, mlp_ratio,
                  attention):
    for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("nlat", nlat),
                        ("nlon", nlon), ("scale_factor", scale_factor), ("embed_dim", embed_dim),
                        ("n_layers", n_layers), ("n_heads", n_heads), ("mlp_ratio", mlp_ratio)]:
        check_positive_int(name, value)
    check_choice("attention", attention, ATTENTIONS)
    if nlon % scale_factor:
        raise ValueError(f"scale_factor: expected a divisor of nlon={nlon} (integer longitude ratio), got {scale_factor}")
    if embed_dim % n_heads:
        raise ValueError(f"n_heads: expected a divisor of embed_dim={embed_dim}, got {n_heads}")
    return (nlat - 1) // scale_factor + 1, nlon // scale_factor


class _GridTransformer(nn.Module):
    """Shared skeleton; subclasses build ``encoder``, ``blocks``, ``decoder`` and the ``pos`` buffer."""

    input_kind = "sphere"

    def _build_head(self, in_channels, out_channels, embed_dim, mlp_ratio, residual_prediction):
        if residual_prediction and in_channels != out_channels:
            raise ValueError(f"residual_prediction: expected in_channels == out_channels, got {in_channels} and "
                             f"{out_channels}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.residual_prediction = residual_prediction
        self.lift = _mlp(in_channels, embed_dim, embed_dim)
        self.norm = _ChannelNorm(embed_dim)
        self.proj = _mlp(embed_dim, mlp_ratio * embed_dim, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_rank("x", x, 4, f"(B, C_in={self.in_channels}, nlat, nlon)")
        check_dim("x", x, 1, self.in_channels, "input channels")
        if tuple(x.shape[2:]) != self.shape:
            raise ValueError(f"x: expected shape (B, {self.in_channels}, {self.shape[0]}, {self.shape[1]}): this model "
                             f"runs only on the grid it was built for, got {tuple(x.shape)}")
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x)
        h = self.encoder(self.lift(x)) + self.pos.to(x.dtype)
        for block in self.blocks:
            h = block(h)
        out = self.proj(self.norm(self.decoder(h)))
        return out + x if self.residual_prediction else out


@register_operator("spherical_transformer")
class SphericalTransformer(_GridTransformer):
    """Transformer on sphere fields of one fixed latitude–longitude grid.

    Args:
        in_channels, out_channels: channels of the input and output fields.
        nlat, nlon: the grid the model runs on.
        grid: its latitude rule (``"equiangular"``, ``"legendre-gauss"``, ``"lobatto"``).
        grid_internal: latitude rule of the internal grid.
        scale_factor: encoder downsampling ``s`` (divides ``nlon``): internal grid ``((nlat-1)//s+1, nlon/s)``.
        embed_dim: channels of the latent field; n_layers: attention blocks; n_heads: heads.
        mlp_ratio: hidden width of the MLPs as a multiple of ``embed_dim``.
        attention: ``"global"`` or ``"neighborhood"`` for the internal blocks.
        theta_cutoff: radius (radians) of the internal neighbourhoods; ``None``: ``(7/√π)·Δθ``.
        pos_embed: ``"zonal"`` (Legendre polynomials of latitude, :func:`zonal_legendre_embedding`: the
            model commutes with longitude shifts by the internal spacing), ``"spectral"`` (all real
            spherical harmonics, :func:`spherical_harmonic_embedding`: breaks that symmetry) or ``"none"``.
        residual_prediction: add the input to the output (needs ``in_channels == out_channels``).
    """

    def __init__(self, *, in_channels: int, out_channels: int, nlat: int, nlon: int, grid: str = "equiangular",
                 grid_internal: str = "legendre-gauss", scale_factor: int = 2, embed_dim: int = 64,
                 n_layers: int = 4, n_heads: int = 1, mlp_ratio: int = 2, attention: str = "neighborhood",
                 theta_cutoff: float | None = None, pos_embed: str = "zonal",
                 residual_prediction: bool = False) -> None:
        super().__init__()
        inner = _check_common(in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads,
                              mlp_ratio, attention)
        check_choice("grid", grid, SPHERE_GRIDS)
        check_choice("grid_internal", grid_internal, SPHERE_GRIDS)
        check_choice("pos_embed", pos_embed, tuple(SPHERE_EMBEDDINGS))
        self.shape, self.inner_shape, self.attention, self.pos_embed = (nlat, nlon), inner, attention, pos_embed
        SphereGrid(nlat, nlon, grid), SphereGrid(*inner, grid_internal)  # validates nlat against the rules
        self._build_head(in_channels, out_channels, embed_dim, mlp_ratio, residual_prediction)
        if theta_cutoff is None:
            theta_cutoff = DISC_AREA_FACTOR * latitude_spacing(SphereGrid(*inner, grid_internal))
        self.theta_cutoff = float(theta_cutoff)
        e, grids = embed_dim, dict(grid_in=grid, grid_out=grid_internal)
        self.encoder = _Resampling(SphericalNeighborhoodAttention(e, n_heads, self.shape, inner, **grids),
                                   SphereResample(self.shape, inner, grid, grid_internal), e)
        if attention == "global":
            def make():
                return SphericalAttention(e, n_heads, inner, grid_in=grid_internal)
        else:
            def make():
                return SphericalNeighborhoodAttention(e, n_heads, inner, grid_in=grid_internal, theta_cutoff=theta_cutoff)
        self.blocks = nn.ModuleList(_Block(make(), e, mlp_ratio) for _ in range(n_layers))
        self.decoder = _Resampling(
            SphericalNeighborhoodAttention(e, n_heads, inner, self.shape, grid_in=grid_internal, grid_out=grid),
            SphereResample(inner, self.shape, grid_internal, grid), e)
        pos = SPHERE_EMBEDDINGS[pos_embed](*inner, grid_internal, e)
        self.register_buffer("pos", pos, persistent=False)


class _PlanarResample(nn.Module):
    def __init__(self, out_shape):
        super().__init__()
        self.out_shape = tuple(out_shape)

    def forward(self, x):
        if tuple(x.shape[2:]) == self.out_shape:
            return x
        return F.interpolate(x, size=self.out_shape, mode="bilinear", align_corners=False)


@register_operator("planar_transformer")
class PlanarTransformer(_GridTransformer):
    """The planar baseline of :class:`SphericalTransformer`: the latitude–longitude grid as a flat image.

    Same blocks and parameter count as :class:`SphericalTransformer` for the same ``embed_dim``,
    ``n_layers``, ``n_heads``, ``mlp_ratio`` and channels; attention keys carry uniform weights,
    neighbourhoods are Euclidean discs of ``window_radius`` pixels of the internal image (default
    ``7/√π``, the area of a 7×7 window) with no longitude wrap-around, resampling is image bilinear
    and the positional embedding a 2-D sine–cosine of pixel indices.

    Args:
        in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads, mlp_ratio,
        attention, residual_prediction: as in :class:`SphericalTransformer`.
        window_radius: internal neighbourhood radius in pixels (``None``: ``7/√π``).
        pos_embed: ``"sincos"`` or ``"none"``.
    """

    def __init__(self, *, in_channels: int, out_channels: int, nlat: int, nlon: int, scale_factor: int = 2,
                 embed_dim: int = 64, n_layers: int = 4, n_heads: int = 1, mlp_ratio: int = 2,
                 attention: str = "neighborhood", window_radius: float | None = None, pos_embed: str = "sincos",
                 residual_prediction: bool = False) -> None:
        super().__init__()
        inner = _check_common(in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads,
                              mlp_ratio, attention)
        check_choice("pos_embed", pos_embed, ("sincos", "none"))
        if window_radius is not None and (not isinstance(window_radius, (int, float)) or isinstance(window_radius, bool)
                                          or not math.isfinite(window_radius) or window_radius <= 0):
            raise ValueError(f"window_radius: expected a finite positive number of pixels or None, got {window_radius!r}")
        self.shape, self.inner_shape, self.attention, self.pos_embed = (nlat, nlon), inner, attention, pos_embed
        self.window_radius = DISC_AREA_FACTOR if window_radius is None else float(window_radius)
        self._build_head(in_channels, out_channels, embed_dim, mlp_ratio, residual_prediction)
        e = embed_dim
        self.encoder = _Resampling(_PlanarAttention(e, n_heads, self.shape, inner, radius=1.0), _PlanarResample(inner), e)
        radius = None if attention == "global" else self.window_radius
        self.blocks = nn.ModuleList(_Block(_PlanarAttention(e, n_heads, inner, radius=radius), e, mlp_ratio)
                                    for _ in range(n_layers))
        self.decoder = _Resampling(_PlanarAttention(e, n_heads, inner, self.shape, radius=1.0),
                                   _PlanarResample(self.shape), e)
        pos = planar_sincos_embedding(*inner, e) if pos_embed == "sincos" else torch.zeros(1, e, 1, 1)
        self.register_buffer("pos", pos, persistent=False)
