"""Discretised domains: where the points are and how much each one weighs.

A domain carries the quadrature of the integral that every attention layer approximates,

    u(x) = ∫_Ω κ(q(x), k(y)) v(y) dμ(y)  ≈  Σ_j w_j κ(q_i, k_j) v_j .

* :class:`Grid` — a tensor-product grid on a box, fields shaped ``(B, C, *shape)``.
* :class:`SphereGrid` — a latitude–longitude grid on the unit sphere, fields shaped
  ``(B, C, nlat, nlon)``, with Clenshaw–Curtis, Gauss–Legendre or Lobatto latitudes.
* :class:`PointCloud` — a padded batch of point sets: positions ``(B, N, d)``, weights
  ``(B, N)`` and a validity mask ``(B, N)``.

Both expose ``positions`` and ``weights`` in the flattened token layout ``(B, N, ·)`` that the
attention functionals take. Weights sum to the measure of the domain for a grid, and are
whatever the user supplies (cell areas, Voronoi volumes) for a cloud; attention layers
normalise them to a probability measure per sample, so the layer is invariant to the
domain's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._checks import check_finite, check_rank
from .quadrature import RULES, SPHERE_GRIDS, sphere_quadrature, tensor_rule

__all__ = ["Grid", "PointCloud", "SphereGrid", "fourier_resample", "normalized_weights", "resample_field"]


@dataclass(frozen=True)
class Grid:
    """A regular grid on the box ``Π_k [a_k, b_k]``.

    Args:
        shape: number of nodes per axis, e.g. ``(64, 64)``.
        bounds: ``((a_1, b_1), ...)``; defaults to the unit box.
        rule: quadrature rule, see :mod:`sciattn.quadrature` (``uniform`` by default: nodes
            ``a + (b-a) i/n``, the layout of the FNO/neuraloperator grid files).
    """

    shape: tuple[int, ...]
    bounds: tuple[tuple[float, float], ...] | None = None
    rule: str = "uniform"

    def __post_init__(self) -> None:
        # Symbolic sizes (torch.export with dynamic dims) stay symbolic: int() would fix the resolution.
        shape = tuple(s if isinstance(s, torch.SymInt) else int(s) for s in self.shape)
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"shape: expected a non-empty tuple of positive sizes, got {self.shape!r}")
        object.__setattr__(self, "shape", shape)
        bounds = self.bounds if self.bounds is not None else tuple((0.0, 1.0) for _ in shape)
        bounds = tuple((float(a), float(b)) for a, b in bounds)
        if len(bounds) != len(shape):
            raise ValueError(f"bounds: expected {len(shape)} (a, b) pairs for shape {shape}, got {len(bounds)}")
        object.__setattr__(self, "bounds", bounds)
        if self.rule not in RULES:
            raise ValueError(f"rule: expected one of {list(RULES)}, got {self.rule!r}")

    @classmethod
    def from_field(cls, field: torch.Tensor, spatial_dims: int, **kwargs) -> Grid:
        """Infer the grid of a channels-first field ``(B, C, *spatial)``."""
        check_rank("field", field, 2 + spatial_dims, f"(B, C, {spatial_dims} spatial axes)")
        return cls(tuple(field.shape[-spatial_dims:]), **kwargs)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_points(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def measure(self) -> float:
        m = 1.0
        for a, b in self.bounds:  # type: ignore[union-attr]
            m *= b - a
        return m

    def nodes_and_weights(
        self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``(N, d)`` in C order and weights ``(N,)`` summing to :attr:`measure`."""
        nodes, weights = tensor_rule(self.shape, self.bounds, self.rule)  # type: ignore[arg-type]
        return nodes.to(dtype=dtype, device=device), weights.to(dtype=dtype, device=device)

    def coordinate_channels(self, batch: int, dtype=torch.float32, device=None) -> torch.Tensor:
        """Node coordinates as a channels-first field ``(batch, d, *shape)``."""
        nodes, _ = self.nodes_and_weights(dtype, device)
        field = nodes.T.reshape(self.ndim, *self.shape)
        return field.unsqueeze(0).expand(batch, *field.shape)


@dataclass(frozen=True)
class SphereGrid:
    """An ``nlat × nlon`` latitude–longitude grid on the unit sphere.

    Colatitudes come from :func:`sciattn.quadrature.sphere_quadrature` (north pole first);
    longitudes are ``λ_j = 2π j / nlon``. The area weight of point ``(k, j)`` is
    ``q_kj = 2π w_k / nlon``; the weights sum to ``4π``, so ``Σ q_kj f(x_kj) ≈ ∫_{S²} f dA``.

    Args:
        nlat, nlon: grid size.
        grid: ``"equiangular"``, ``"legendre-gauss"`` or ``"lobatto"``.
    """

    nlat: int
    nlon: int
    grid: str = "equiangular"

    def __post_init__(self) -> None:
        for name in ("nlat", "nlon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        if self.grid not in SPHERE_GRIDS:
            raise ValueError(f"grid: expected one of {list(SPHERE_GRIDS)}, got {self.grid!r}")
        sphere_quadrature(self.nlat, self.grid)  # validates nlat against the grid

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nlat, self.nlon)

    def colatitudes(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``(nlat,)`` colatitudes θ in ``[0, π]``, ascending."""
        return sphere_quadrature(self.nlat, self.grid, dtype)[0]

    def longitudes(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``(nlon,)`` longitudes ``2π j / nlon``."""
        return 2 * torch.pi * torch.arange(self.nlon, dtype=dtype) / self.nlon

    def quadrature_weights(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``(nlat, nlon)`` area weights ``2π w_k / nlon``, summing to ``4π``."""
        w = sphere_quadrature(self.nlat, self.grid, dtype)[1]
        return (2 * torch.pi / self.nlon) * w[:, None].expand(self.nlat, self.nlon).clone()

    def unit_vectors(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``(nlat, nlon, 3)`` Cartesian positions of the points on the unit sphere."""
        theta = self.colatitudes(dtype)[:, None]
        lam = self.longitudes(dtype)[None, :]
        return torch.stack(
            [torch.sin(theta) * torch.cos(lam), torch.sin(theta) * torch.sin(lam), torch.cos(theta).expand_as(lam * theta)],
            dim=-1,
        )


@dataclass
class PointCloud:
    """A padded batch of point sets.

    Shapes:
        positions: ``(B, N, d)``; weights: ``(B, N)`` (uniform when omitted);
        mask: ``(B, N)`` bool, True for real points (all True when omitted).
    """

    positions: torch.Tensor
    weights: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        pos = check_rank("positions", self.positions, 3, "(B, N, d)")
        b, n, _ = pos.shape
        if n == 0:
            raise ValueError(f"positions: expected at least one point, got an empty point set of shape {tuple(pos.shape)}")
        if self.mask is not None:
            check_rank("mask", self.mask, 2, "(B, N)")
            if tuple(self.mask.shape) != (b, n):
                raise ValueError(f"mask: expected shape {(b, n)} to match positions, got {tuple(self.mask.shape)}")
            if self.mask.dtype != torch.bool:
                raise TypeError(f"mask: expected dtype torch.bool, got {self.mask.dtype}")
            has_points = self.mask.any(dim=1).all()
            if torch.compiler.is_compiling():  # torch.export / torch.compile: an in-graph assertion, no branch
                torch._assert_async(has_points, "mask: expected at least one real point per sample")
            elif not bool(has_points):
                raise ValueError("mask: expected at least one real point per sample, got a sample with none")
        check_finite("positions", pos, None if self.mask is None else self.mask[..., None])
        if self.weights is not None:
            check_rank("weights", self.weights, 2, "(B, N)")
            if tuple(self.weights.shape) != (b, n):
                raise ValueError(f"weights: expected shape {(b, n)} to match positions, got {tuple(self.weights.shape)}")

    @property
    def ndim(self) -> int:
        return self.positions.shape[-1]

    def quadrature_weights(self) -> torch.Tensor:
        """Weights ``(B, N)``, zero on padding and normalised to sum to one per sample."""
        return normalized_weights(self.weights, self.mask, self.positions.shape[:2], self.positions.dtype,
                                  self.positions.device)


def normalized_weights(
    weights: torch.Tensor | None,
    mask: torch.Tensor | None,
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> torch.Tensor:
    """Per-sample probability weights ``(B, N)``: ``w_j / Σ_j w_j`` over real points, 0 on padding.

    ``weights`` may be ``(N,)`` (shared by the batch) or ``(B, N)``; ``None`` means uniform.
    """
    b, n = shape[0], shape[1]  # no int(): sizes may be symbolic under torch.export
    if weights is None:
        w = torch.ones(b, n, dtype=dtype, device=device)
    else:
        w = weights.to(dtype=dtype, device=device)
        if w.dim() == 1:
            w = w.unsqueeze(0)
        w = w.expand(b, n)
    if mask is not None:
        w = torch.where(mask, w, torch.zeros((), dtype=dtype, device=device))
    return w / w.sum(dim=1, keepdim=True)


def _sizes(shape: Sequence[int]) -> tuple[int, ...]:
    """Sizes as ints, symbolic ones (torch.export with dynamic dims) left symbolic: int() would fix them."""
    return tuple(s if isinstance(s, torch.SymInt) else int(s) for s in shape)


def _known(cond) -> bool:
    """``cond`` for concrete sizes; for symbolic ones, True only when it holds for every size the trace
    allows (no guard is added, so a traced program does not specialise on the branch)."""
    if not isinstance(cond, torch.SymBool):
        return bool(cond)
    from torch.fx.experimental.symbolic_shapes import statically_known_true  # sympy: ~0.3 s, export only

    return statically_known_true(cond)


def _copy_spectrum_symbolic(spec: torch.Tensor, src: tuple, shape: tuple) -> torch.Tensor:
    """:func:`fourier_resample`'s spectrum copy for symbolic sizes (torch.export), without size-dependent
    slicing (whose bounds checks would guard on the sizes): the target spectrum is gathered from ``spec``
    per axis and masked to the kept frequencies ``|k| <= (min(n, m) - 1) // 2``. The eager early return
    for equal sizes cannot be taken on symbolic ones, so when every size equals its target the whole
    spectrum is kept instead: the series is then the identity (up to round-off), as in eager mode."""
    d = len(shape)
    dev = spec.device
    mismatch = 0
    for n, m in zip(src, shape):
        mismatch = mismatch + (n - m) * (n - m)
    same = torch.full((), mismatch, device=dev) == 0
    out = spec
    for ax, (n, m) in enumerate(zip(src, shape)):
        h = (torch.sym_min(n, m) - 1) // 2
        if ax == d - 1:  # rfft axis: frequencies 0..m // 2
            f = torch.arange(m // 2 + 1, device=dev)
            index = torch.clamp(f, max=n // 2)
        else:
            j = torch.arange(m, device=dev)
            f = torch.where(j <= m // 2, j, j - m)
            index = torch.remainder(f, n)
        keep = ((f <= h) & (f >= -h)) | same
        view = [1] * out.dim()
        view[2 + ax] = -1
        out = out.index_select(2 + ax, index) * keep.view(view).to(spec.real.dtype)
    return out


def resample_field(field: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Multilinear resampling of a channels-first field ``(B, C, *n)`` on the ``uniform`` node layout
    (nodes ``i/n_k`` along each axis) onto the same layout with ``shape`` nodes, ``(B, C, *shape)``.

    Nested grids are sampled exactly: resampling a 128-node axis to 32 nodes returns every fourth
    value, the same restriction the data generators use. Nodes beyond the last input node (when
    refining) take the boundary value.
    """
    shape = _sizes(shape)
    d = len(shape)
    check_rank("field", field, 2 + d, f"(B, C, {d} spatial axes)")
    src = tuple(field.shape[2:])
    if all(_known(n == m) for n, m in zip(src, shape)):  # symbolic sizes: slicing with step 1 below is the identity
        return field
    # nested grids: exact restriction by slicing (symbolic sizes declared as multiples of shape decide this
    # without a guard; others specialise here)
    if all(n % m == 0 for n, m in zip(src, shape)):
        if not any(isinstance(n, torch.SymInt) for n in src):
            return field[(...,) + tuple(slice(None, None, n // m) for n, m in zip(src, shape))]
        # Symbolic sizes (torch.export, sizes declared as multiples of shape): the same nodes i * (n // m),
        # gathered, so the result has the sizes m (a strided slice's size, ceil(n / (n // m)), is not
        # simplified to m, and a reshape would guard on n == m)
        for ax, (n, m) in enumerate(zip(src, shape)):
            index = torch.arange(m, device=field.device) * (n // m)
            field = field.index_select(2 + ax, index)
        return field
    if any(n < 2 for n in src):
        raise ValueError(f"field: expected at least 2 nodes per axis to interpolate, got spatial shape {src}")
    axes = []
    for n, m in zip(src, shape):
        idx = torch.arange(m, dtype=field.dtype, device=field.device) * (n / m)
        axes.append(2 * idx / (n - 1) - 1)
    mesh = torch.meshgrid(*axes, indexing="ij")
    grid = torch.stack(mesh[::-1], dim=-1)  # grid_sample wants (x=last axis, y, z) order
    squeeze = d == 1
    if squeeze:  # treat 1-D as 2-D with a singleton axis
        field = field.unsqueeze(-2)
        grid = torch.stack([grid[..., 0], torch.zeros_like(grid[..., 0])], dim=-1).unsqueeze(0)
    grid = grid.unsqueeze(0).expand(field.shape[0], *grid.shape)
    out = torch.nn.functional.grid_sample(field, grid, mode="bilinear", padding_mode="border", align_corners=True)
    return out.squeeze(-2) if squeeze else out


def fourier_resample(field: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Evaluate the trigonometric interpolant of ``(B, C, *n)`` on the ``uniform`` node layout with
    ``shape`` nodes: zero-padding (or truncating) the Fourier series.

    Frequencies ``|k| ≤ (min(n, m) - 1) // 2`` per axis are kept, so a field band-limited below the
    coarser grid's Nyquist frequency is resampled exactly (values at shared nodes are unchanged).
    """
    shape = _sizes(shape)
    d = len(shape)
    check_rank("field", field, 2 + d, f"(B, C, {d} spatial axes)")
    src = tuple(field.shape[2:])
    if all(_known(n == m) for n, m in zip(src, shape)):  # symbolic sizes that may equal src take the series
        return field
    axes = tuple(range(-d, 0))
    spec = torch.fft.rfftn(field, dim=axes, norm="forward")
    if any(isinstance(n, torch.SymInt) for n in src + shape):
        return torch.fft.irfftn(_copy_spectrum_symbolic(spec, src, shape), s=shape, dim=axes, norm="forward")
    out = spec.new_zeros(*field.shape[:2], *shape[:-1], shape[-1] // 2 + 1)
    index_in, index_out = [slice(None), slice(None)], [slice(None), slice(None)]
    # Build the copy as a product of per-axis (positive, negative) frequency blocks.
    blocks = [[]]
    for ax, (n, m) in enumerate(zip(src, shape)):
        h = (min(n, m) - 1) // 2
        if ax == d - 1:
            parts = [(slice(0, h + 1), slice(0, h + 1))]
        else:
            parts = [(slice(0, h + 1), slice(0, h + 1))] + ([(slice(n - h, n), slice(m - h, m))] if h > 0 else [])
        blocks = [b + [p] for b in blocks for p in parts]
    for block in blocks:
        src_idx = tuple(index_in + [p[0] for p in block])
        dst_idx = tuple(index_out + [p[1] for p in block])
        out[dst_idx] = spec[src_idx]
    return torch.fft.irfftn(out, s=shape, dim=axes, norm="forward")
