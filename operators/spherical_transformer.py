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

**Any grid, same operator.** The internal grid ``h × w``, the internal disc radius and the
encoder/decoder radius are fixed when the model is built (from the construction grid, or the
``internal_shape``/``theta_cutoff`` arguments). Called on another ``nlat' × nlon'`` grid (same
latitude rule), the model runs the same weights through that grid's geometry: the neighbourhoods,
quadrature weights and interpolation between the input grid and the fixed internal grid, built once
and cached per ``(nlat', nlon', rule, device)`` (the last ``grid_cache_size`` = 8 grids; the first call
on a grid costs about 0.07 s more than the next at 65×128 and 0.4 s more at 129×256 on one CPU thread,
``python -m benchmarks run sphere_resolution``; the construction grid keeps its precomputed path). The
internal blocks then compute exactly what they compute at the construction grid, so the change of grid
acts only through the encoder
(quadrature of the input over geodesic discs of fixed radius, converging as the input grid is
refined) and the decoder (each output point depends on its position only, so outputs at shared
nodes of two grids agree up to the encoder's difference). The encoder/decoder radius is one
latitude spacing of the coarser of the input and internal grids: the internal spacing, a fixed
angle, unless the input grid is coarser than the internal grid (then the input's spacing, so that
no disc is empty). ``nlon'`` must be a multiple or a divisor of ``w``. :meth:`on_grid` returns a
standalone copy on another grid (for export). The planar baseline does the same in pixel units of
its fixed internal image.

Shapes: ``x`` ``(B, C_in, nlat, nlon)`` -> ``(B, C_out, nlat, nlon)``.
"""

from __future__ import annotations

import collections
import functools
import math

import numpy as np
import torch
import torch.nn.functional as F
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
from sciattn.spherical.module import _ProjectedAttention, check_shape
from sciattn.spherical.neighborhoods import default_theta_cutoff, latitude_spacing
from sciattn.weighted_softmax import weighted_softmax_attention

from ._layers import ChannelNorm as _ChannelNorm
from .contract import ExportPolicy, Operator
from .registry import create_operator, register_operator

__all__ = ["PlanarTransformer", "SphericalTransformer", "planar_disc_csr", "zonal_legendre_embedding"]

ATTENTIONS = ("global", "neighborhood")
DISC_AREA_FACTOR = 7.0 / math.sqrt(math.pi)  # π r² = 49 Δ²: a disc with the area of a 7×7 window


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
    # Imported here, not at module level: scipy.special costs ~0.7 s of `import sciattn.train`.
    from scipy import special

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
    from scipy import special

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
                  attention, internal_shape=None):
    """Check the shared arguments; return the internal grid ``(h, w)``: ``internal_shape`` if given, else
    ``((nlat − 1)//s + 1, nlon/s)``."""
    for name, value in [("in_channels", in_channels), ("out_channels", out_channels), ("nlat", nlat),
                        ("nlon", nlon), ("scale_factor", scale_factor), ("embed_dim", embed_dim),
                        ("n_layers", n_layers), ("n_heads", n_heads), ("mlp_ratio", mlp_ratio)]:
        check_positive_int(name, value)
    check_choice("attention", attention, ATTENTIONS)
    if embed_dim % n_heads:
        raise ValueError(f"n_heads: expected a divisor of embed_dim={embed_dim}, got {n_heads}")
    if internal_shape is not None:
        inner = check_shape("internal_shape", tuple(internal_shape) if isinstance(internal_shape, list)
                            else internal_shape)
        if nlon % inner[1] and inner[1] % nlon:
            raise ValueError(f"nlon: expected a multiple or a divisor of the internal grid's nlon = {inner[1]} "
                             f"(internal_shape {inner[0]}x{inner[1]}), got {nlon}")
        return inner
    if nlon % scale_factor:
        raise ValueError(f"scale_factor: expected a divisor of nlon={nlon} (integer longitude ratio), got {scale_factor}")
    return (nlat - 1) // scale_factor + 1, nlon // scale_factor


class _GridTransformer(Operator):
    """Shared skeleton; subclasses build ``encoder``, ``blocks``, ``decoder`` and the ``pos`` buffer."""

    input_kind = "sphere"
    spatial_dims = 2
    #: how many other grids' geometries a model keeps (least recently used first out), so a sweep over many
    #: grids does not hold every grid's neighbourhoods in memory
    grid_cache_size = 8
    #: why an exported program runs on one grid (``sciattn.train.deployment.export`` reports it in the export's note)
    export_fixed_reason = ("a program holds the neighbourhoods and quadrature of one nlat x nlon grid, built in Python "
                           "for that grid; the operator runs on any grid whose nlon is a multiple or a divisor of its "
                           "internal grid's: export once per grid (example_shape=(nlat, nlon), CLI --shape NLATxNLON)")

    def _build_head(self, in_channels, out_channels, embed_dim, mlp_ratio, residual_prediction):
        if residual_prediction and in_channels != out_channels:
            raise ValueError(f"residual_prediction: expected in_channels == out_channels, got {in_channels} and "
                             f"{out_channels}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.residual_prediction = residual_prediction
        self.lift = _mlp(in_channels, embed_dim, embed_dim)
        self.norm = _ChannelNorm(embed_dim)
        self.proj = _mlp(embed_dim, mlp_ratio * embed_dim, out_channels)

    def _kwargs_at(self, nlat: int, nlon: int, grid: str | None) -> dict:
        """Constructor arguments of this model on ``nlat × nlon``: the construction's internal grid and
        radii, so only the input/output grid changes. Subclasses add their radius."""
        kwargs = {**self._build_kwargs, "nlat": int(nlat), "nlon": int(nlon), "internal_shape": list(self.inner_shape)}
        if grid is not None:
            kwargs["grid"] = grid
        return kwargs

    def _build_at(self, nlat: int, nlon: int, grid: str | None = None) -> _GridTransformer:
        """The same operator (internal grid, radii, embedding) on another input/output grid, with fresh
        weights drawn without touching the global random stream."""
        try:
            with torch.random.fork_rng(devices=[]):
                return create_operator(self.operator_name, **self._kwargs_at(nlat, nlon, grid))
        except ValueError as err:
            raise ValueError(
                f"x: expected a grid this model can run on (nlat valid for its latitude rule, nlon a multiple or a "
                f"divisor of its internal grid's nlon = {self.inner_shape[1]}; internal grid "
                f"{self.inner_shape[0]}x{self.inner_shape[1]}), got {nlat}x{nlon}: {err}"
            ) from None

    def on_grid(self, nlat: int, nlon: int, grid: str | None = None) -> _GridTransformer:
        """A standalone copy of this model on the ``nlat × nlon`` grid (latitude rule ``grid``, default the
        model's): same weights (copied), same internal grid and radii, so on the model's own grid it gives
        the same output and elsewhere the same output as ``self(x)``. For export at one grid (the copy's
        forward is the fixed-grid path); ``self(x)`` needs no copy."""
        check_positive_int("nlat", nlat)
        check_positive_int("nlon", nlon)
        model = self._build_at(nlat, nlon, grid)
        model.load_state_dict(self.state_dict())
        ref = next(self.parameters())
        return model.to(device=ref.device, dtype=ref.dtype).train(self.training)

    def _grid_model(self, shape: tuple[int, int], device: torch.device) -> _GridTransformer:
        """The geometry (neighbourhoods, quadrature, interpolation) of another grid, cached per
        ``(nlat, nlon, grid rule, device)``; its own weights are never used (``forward`` substitutes this
        model's). At most :attr:`grid_cache_size` grids are kept, the least recently used dropped first."""
        cache = self.__dict__.setdefault("_grid_models", collections.OrderedDict())
        key = (*shape, self._build_kwargs.get("grid"), str(device))
        if key in cache:
            cache.move_to_end(key)
        else:
            cache[key] = self._build_at(*shape).to(device)
            while len(cache) > self.grid_cache_size:
                cache.popitem(last=False)
        return cache[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_rank("x", x, 4, f"(B, C_in={self.in_channels}, nlat, nlon)")
        check_dim("x", x, 1, self.in_channels, "input channels")
        check_input_dtype("x", x, self, "operator")
        check_finite("x", x)
        if tuple(x.shape[2:]) != self.shape:  # another grid: its geometry with this model's weights
            other = self._grid_model(tuple(x.shape[2:]), x.device).train(self.training)
            return torch.func.functional_call(other, dict(self.named_parameters()), (x,))
        h = self.encoder(self.lift(x)) + self.pos.to(x.dtype)
        for block in self.blocks:
            h = block(h)
        out = self.proj(self.norm(self.decoder(h)))
        return out + x if self.residual_prediction else out


@register_operator("spherical_transformer")
class SphericalTransformer(_GridTransformer):
    """Transformer on sphere fields of latitude–longitude grids.

    Args:
        in_channels, out_channels: channels of the input and output fields.
        nlat, nlon: the construction grid (it sets the internal grid and the default radii).
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
        internal_shape: the internal grid ``[h, w]``; ``None``: ``((nlat-1)//s+1, nlon/s)``. :meth:`on_grid`
            sets it (with ``theta_cutoff``) to keep the construction's internal grid on another grid.

    The model runs on any grid of its latitude rule whose ``nlon`` is a multiple or a divisor of the
    internal ``w`` (module docstring); ``theta_cutoff`` (resolved) and ``resample_cutoff`` (the
    encoder/decoder radius at the construction grid) are radians.
    """

    export_policy = ExportPolicy(fixed_grid=(
        "a program holds the geodesic-disc neighbourhoods and quadrature of one nlat x nlon sphere grid, built in "
        "Python for that grid, so it runs on that grid only; the operator itself runs on any grid whose nlon is a "
        "multiple or a divisor of its internal grid's (same weights): export once per grid with "
        "example_shape=(nlat, nlon) (CLI: --shape NLATxNLON)"))

    def __init__(self, *, in_channels: int, out_channels: int, nlat: int, nlon: int, grid: str = "equiangular",
                 grid_internal: str = "legendre-gauss", scale_factor: int = 2, embed_dim: int = 64,
                 n_layers: int = 4, n_heads: int = 1, mlp_ratio: int = 2, attention: str = "neighborhood",
                 theta_cutoff: float | None = None, pos_embed: str = "zonal",
                 residual_prediction: bool = False, internal_shape: list[int] | None = None) -> None:
        super().__init__()
        inner = _check_common(in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads,
                              mlp_ratio, attention, internal_shape)
        self._build_kwargs = dict(
            in_channels=in_channels, out_channels=out_channels, nlat=nlat, nlon=nlon, grid=grid,
            grid_internal=grid_internal, scale_factor=scale_factor, embed_dim=embed_dim, n_layers=n_layers,
            n_heads=n_heads, mlp_ratio=mlp_ratio, attention=attention, theta_cutoff=theta_cutoff,
            pos_embed=pos_embed, residual_prediction=residual_prediction, internal_shape=internal_shape)
        check_choice("grid", grid, SPHERE_GRIDS)
        check_choice("grid_internal", grid_internal, SPHERE_GRIDS)
        check_choice("pos_embed", pos_embed, tuple(SPHERE_EMBEDDINGS))
        self.shape, self.inner_shape, self.attention, self.pos_embed = (nlat, nlon), inner, attention, pos_embed
        SphereGrid(nlat, nlon, grid), SphereGrid(*inner, grid_internal)  # validates nlat against the rules
        self._build_head(in_channels, out_channels, embed_dim, mlp_ratio, residual_prediction)
        if theta_cutoff is None:  # a physical angle, from the internal grid fixed at construction
            theta_cutoff = DISC_AREA_FACTOR * latitude_spacing(SphereGrid(*inner, grid_internal))
        self.theta_cutoff = float(theta_cutoff)
        # the encoder/decoder discs: one latitude spacing of the coarser of the two grids (the internal
        # grid's, unless the input grid is coarser than it)
        self.resample_cutoff = default_theta_cutoff(SphereGrid(nlat, nlon, grid), SphereGrid(*inner, grid_internal))
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


    def _kwargs_at(self, nlat: int, nlon: int, grid: str | None) -> dict:
        return {**super()._kwargs_at(nlat, nlon, grid), "theta_cutoff": self.theta_cutoff}


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
        in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads, mlp_ratio, attention, residual_prediction: as in :class:`SphericalTransformer`.
        window_radius: internal neighbourhood radius in pixels (``None``: ``7/√π``).
        pos_embed: ``"sincos"`` or ``"none"``.
        internal_shape: the internal image ``[h, w]`` (``None``: as :class:`SphericalTransformer`).

    Runs on any ``nlat' × nlon'`` with ``nlon'`` a multiple or a divisor of the internal ``w``: the
    internal image stays fixed; encoder/decoder discs have a radius of one pixel of the coarser of the
    two images (``planar_disc_csr``), i.e. one internal pixel unless the input is coarser.
    """

    export_policy = ExportPolicy(fixed_grid=(
        "a program holds the disc neighbourhoods of one nlat x nlon image, built in Python for that grid, so it runs "
        "on that grid only; the operator itself runs on any grid whose nlon is a multiple or a divisor of its "
        "internal grid's (same weights): export once per grid with example_shape=(nlat, nlon) (CLI: --shape "
        "NLATxNLON)"))

    def __init__(self, *, in_channels: int, out_channels: int, nlat: int, nlon: int, scale_factor: int = 2,
                 embed_dim: int = 64, n_layers: int = 4, n_heads: int = 1, mlp_ratio: int = 2,
                 attention: str = "neighborhood", window_radius: float | None = None, pos_embed: str = "sincos",
                 residual_prediction: bool = False, internal_shape: list[int] | None = None) -> None:
        super().__init__()
        inner = _check_common(in_channels, out_channels, nlat, nlon, scale_factor, embed_dim, n_layers, n_heads,
                              mlp_ratio, attention, internal_shape)
        self._build_kwargs = dict(
            in_channels=in_channels, out_channels=out_channels, nlat=nlat, nlon=nlon, scale_factor=scale_factor,
            embed_dim=embed_dim, n_layers=n_layers, n_heads=n_heads, mlp_ratio=mlp_ratio, attention=attention,
            window_radius=window_radius, pos_embed=pos_embed, residual_prediction=residual_prediction,
            internal_shape=internal_shape)
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
