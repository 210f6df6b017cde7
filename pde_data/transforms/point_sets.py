"""Point sets on the unit square and the unit torus: sampling, quadrature weights, grid-to-point interpolation.

The generic machinery behind the irregular datasets (:mod:`.irregular`): draw ``N`` points,
give them area weights ``w`` so that ``∫_{[0,1]^2} f(x) dx ≈ Σ_i w_i f(x_i)`` (``Σ_i w_i = 1``, the
domain's area), and evaluate fields stored on a regular grid at the points.

Points (:func:`sample_points`)
    ``"uniform"``: i.i.d. uniform; ``"jittered"``: one point in each of ``n`` distinct cells of a
    ``k x k`` grid (``k = ceil(sqrt n)``), at ``cell centre + jitter (U - 1/2) / k``. On the unit
    square the four corners are always the first four points, so the Delaunay triangulation covers
    the square; on the unit torus points lie in ``[0, 1)^2``.

Quadrature weights (:func:`quadrature_weights`), summing to the domain area 1
    ``"delaunay"``: one third of the area of each incident triangle, ``w_i = Σ_{T∋i} |T|/3``; this
    integrates the piecewise-linear interpolant exactly, so linear functions exactly.
    ``"voronoi"``: the area of the Voronoi cell clipped to the domain,
    ``w_i = Σ_{T∋i} [ |x_i, m_ij, c_T| + |x_i, c_T, m_ik| ]`` (signed areas with the edge midpoints
    ``m`` and the circumcentre ``c_T`` of each incident Delaunay triangle). Clipping to the square uses
    the points mirrored across its sides and corners (a mirrored point is never nearer to a point of
    the square than its original), a point on a side keeps the half of its symmetric cell inside,
    a corner a quarter. On the torus both use periodic copies. Copies are taken within a margin of
    the domain that doubles until every triangle used has its circumdisk inside the padded box (so
    it is a Delaunay triangle of the infinite mirrored or periodic set).

Interpolation from a grid (:func:`bilinear_interpolate`, :func:`fourier_interpolate`)
    Bilinear on nodes ``i/(M-1)`` (both sides of the square) or periodic nodes ``i/M``: exact for
    bilinear fields, error ``<= h^2/8 (|f_xx| + |f_yy|)``. Trigonometric on periodic nodes ``i/S``:
    ``f(x) = Σ_{|k_a| <= S/2} f̂_k e^{2πi k·x}``, exact for band-limited fields, the Nyquist mode
    of an even ``S`` taken as a cosine so the interpolant is real.

Shapes:
    pos ``(N, 2)`` float64, axis 0 is x; weights ``(N,)``; fields ``(..., M, M)`` -> values ``(..., N)``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import Delaunay

from sciattn._checks import check_choice, check_positive_int

__all__ = ["DOMAINS", "LAYOUTS", "WEIGHTS", "sample_points", "quadrature_weights", "bilinear_interpolate",
           "fourier_interpolate"]

DOMAINS, LAYOUTS, WEIGHTS = ("square", "torus"), ("uniform", "jittered"), ("delaunay", "voronoi")


# ------------------------------------------------------------------------------------ points


def sample_points(n: int, *, rng: np.random.Generator, domain: str = "square", layout: str = "uniform",
                  jitter: float = 1.0) -> np.ndarray:
    """``(n, 2)`` float64 points in the unit square (corners first) or the unit torus ``[0, 1)^2``."""
    check_choice("domain", domain, DOMAINS)
    check_choice("layout", layout, LAYOUTS)
    check_positive_int("n", n)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if not 0.0 <= float(jitter) <= 1.0:
        raise ValueError(f"jitter: expected a number in [0, 1], got {jitter}")
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]) if domain == "square" else np.zeros((0, 2))
    m = n - len(corners)
    least = 4 if domain == "square" else 3
    if n < least:
        raise ValueError(f"n: expected at least {least} points on the {domain}, got {n}")
    if layout == "uniform":
        pts = rng.random((m, 2))
    else:
        k = math.ceil(math.sqrt(m))
        cells = rng.choice(k * k, size=m, replace=False)
        centre = np.stack([cells // k, cells % k], axis=1) + 0.5
        pts = (centre + float(jitter) * (rng.random((m, 2)) - 0.5)) / k
        pts = np.minimum(pts, np.nextafter(1.0, 0.0))  # stay inside [0, 1)
    return np.concatenate([corners, pts])


def _check_pos(pos: object, domain: str) -> np.ndarray:
    if not isinstance(pos, np.ndarray) or pos.ndim != 2 or pos.shape[1] != 2 or pos.shape[0] < 3:
        got = f"shape {pos.shape}" if isinstance(pos, np.ndarray) else type(pos).__name__
        raise ValueError(f"pos: expected a numpy array (N, 2) with N >= 3, got {got}")
    p = np.asarray(pos, dtype=np.float64)
    hi_ok = p <= 1.0 if domain == "square" else p < 1.0
    if not (np.isfinite(p).all() and (p >= 0.0).all() and hi_ok.all()):
        box = "[0, 1]^2" if domain == "square" else "[0, 1)^2"
        raise ValueError(f"pos: expected finite points in {box} for domain={domain!r}, got range [{p.min()}, {p.max()}]")
    return p


# ------------------------------------------------------------------------------------ weights


def _augment(p: np.ndarray, domain: str, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points, the index of their original and a symmetry count: the square's points mirrored across
    sides/corners (a point on a mirror line is not copied onto itself), or the torus' periodic copies,
    within ``margin`` of the unit box."""
    n = len(p)
    idx = np.arange(n)
    out, src = [p], [idx]
    for sx in (-1, 0, 1):
        for sy in (-1, 0, 1):
            if sx == sy == 0:
                continue
            q = p.copy()
            keep = np.ones(n, dtype=bool)
            for ax, s in ((0, sx), (1, sy)):
                if s == 0:
                    continue
                if domain == "torus":
                    q[:, ax] = p[:, ax] + s
                else:
                    q[:, ax] = -p[:, ax] if s < 0 else 2.0 - p[:, ax]
                    keep &= p[:, ax] > 0 if s < 0 else p[:, ax] < 1
                keep &= (q[:, ax] >= -margin) & (q[:, ax] <= 1 + margin)
            out.append(q[keep])
            src.append(idx[keep])
    on_side = ((p == 0) | (p == 1)).sum(1) if domain == "square" else np.zeros(n, dtype=np.int64)
    return np.concatenate(out), np.concatenate(src), on_side


def _circumcentres(a, b, c):
    ab, ac = b - a, c - a
    d = 2.0 * (ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0])
    nb, nc = (ab**2).sum(1), (ac**2).sum(1)
    off = np.stack([ac[:, 1] * nb - ab[:, 1] * nc, ab[:, 0] * nc - ac[:, 0] * nb], axis=1) / d[:, None]
    return a + off, np.sqrt((off**2).sum(1)), d / 4.0  # centre, radius, signed area


def _cross(u, v):
    return u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]


def quadrature_weights(pos: np.ndarray, *, method: str = "delaunay", domain: str = "square") -> np.ndarray:
    """``(N,)`` area weights of the points ``pos (N, 2)``, summing to 1 (see the module docstring).

    ``"delaunay"`` on the square needs the four corners among the points (:func:`sample_points`
    puts them first); a triangulation that does not cover the square raises ``ValueError``.
    """
    check_choice("method", method, WEIGHTS)
    check_choice("domain", domain, DOMAINS)
    p = _check_pos(pos, domain)
    n = len(p)
    if method == "delaunay" and domain == "square":
        tri = Delaunay(p).simplices
        area = np.abs(_cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])) / 2.0
        if abs(area.sum() - 1.0) > 1e-9:
            raise ValueError(f"pos: the Delaunay triangles cover an area of {area.sum():.6f}, not the unit square; "
                             "include the four corners (sample_points does) or use method='voronoi'")
        w = np.bincount(tri.ravel(), np.repeat(area / 3.0, 3), minlength=n)
    else:
        w = _augmented_weights(p, method, domain)
    if abs(w.sum() - 1.0) > 1e-8 or (w <= 0).any():
        raise ValueError(f"pos: {method} weights sum to {w.sum():.10f} with {(w <= 0).sum()} non-positive entries "
                         "(duplicate or degenerate points?)")
    return w


def _augmented_weights(p: np.ndarray, method: str, domain: str) -> np.ndarray:
    """Voronoi (square or torus) or periodic Delaunay weights from the triangulation of the mirrored or
    periodic copies within a margin, doubled until every triangle used is Delaunay for the infinite set."""
    n = len(p)
    margin = min(1.0, 4.0 / math.sqrt(n))
    while True:
        pts, src, on_side = _augment(p, domain, margin)
        tri = Delaunay(pts).simplices
        a, b, c = pts[tri[:, 0]], pts[tri[:, 1]], pts[tri[:, 2]]
        if method == "delaunay":  # the periodic triangles whose centroid lies in [0, 1)^2
            g = (a + b + c) / 3.0
            use = ((g >= 0) & (g < 1)).all(1)
        else:  # the triangles at an original point
            use = (tri < n).any(1)
        tri, a, b, c = tri[use], a[use], b[use], c[use]
        with np.errstate(divide="ignore", invalid="ignore"):
            centre, radius, signed = _circumcentres(a, b, c)
        ok = bool(((centre - radius[:, None] >= -margin) & (centre + radius[:, None] <= 1 + margin)).all())
        if ok or margin >= 1.0:
            break
        margin = min(1.0, 2.0 * margin)
    if method == "delaunay":
        verts, part = tri.ravel(), np.repeat(np.abs(signed) / 3.0, 3)
    else:
        flip = signed < 0
        tri[flip] = tri[flip][:, [0, 2, 1]]  # counter-clockwise
        verts, part = [], []
        for r in range(3):
            i, j, k = tri[:, r], tri[:, (r + 1) % 3], tri[:, (r + 2) % 3]
            xi = pts[i]
            mij, mik = (xi + pts[j]) / 2.0, (xi + pts[k]) / 2.0
            part.append(0.5 * (_cross(mij - xi, centre - xi) + _cross(centre - xi, mik - xi)))
            verts.append(i)
        verts, part = np.concatenate(verts), np.concatenate(part)
        keep = verts < n
        verts, part = verts[keep], part[keep]
    return np.bincount(src[verts], part, minlength=n) / 2.0**on_side


# ------------------------------------------------------------------------------------ interpolation


def _indices(x: np.ndarray, m: int, periodic: bool):
    t = x * m if periodic else x * (m - 1)
    i0 = np.floor(t).astype(np.int64)
    if periodic:
        return i0 % m, (i0 + 1) % m, t - i0
    i0 = np.clip(i0, 0, m - 2)
    return i0, i0 + 1, t - i0


def bilinear_interpolate(field: np.ndarray, pos: np.ndarray, *, periodic: bool = False) -> np.ndarray:
    """Bilinear values ``(..., N)`` of nodal ``field (..., M, M)`` at ``pos (N, 2)`` (axis 0 is x).

    Nodes: ``i/(M-1)``, ``i = 0..M-1`` (both sides of the square), or ``i/M`` when ``periodic``.
    """
    f = np.asarray(field, dtype=np.float64)
    if f.ndim < 2 or f.shape[-1] != f.shape[-2] or f.shape[-1] < 2:
        raise ValueError(f"field: expected nodal values (..., M, M) with M >= 2, got shape {f.shape}")
    m = f.shape[-1]
    i0, i1, fx = _indices(pos[:, 0], m, periodic)
    j0, j1, fy = _indices(pos[:, 1], m, periodic)
    return ((1 - fx) * (1 - fy) * f[..., i0, j0] + fx * (1 - fy) * f[..., i1, j0]
            + (1 - fx) * fy * f[..., i0, j1] + fx * fy * f[..., i1, j1])


def fourier_interpolate(field: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Trigonometric interpolant ``(..., N)`` of periodic ``field (..., S, S)`` (nodes ``i/S``) at ``pos``.

    ``f(x) = Σ_k f̂_k e^{2πi k·x}`` over ``|k_a| <= S/2``; an even ``S``'s Nyquist mode enters as
    ``cos(π S x)``, so ``f`` is real and equals the field at the nodes. Cost ``O(N S^2)`` per field.
    """
    f = np.asarray(field, dtype=np.float64)
    if f.ndim < 2 or f.shape[-1] != f.shape[-2]:
        raise ValueError(f"field: expected a periodic field (..., S, S), got shape {f.shape}")
    s = f.shape[-1]
    coef = np.fft.fft2(f) / s**2
    k = np.fft.fftfreq(s, 1.0 / s)

    def basis(x):
        e = np.exp(2j * np.pi * x[:, None] * k[None, :])
        if s % 2 == 0:
            e[:, s // 2] = np.cos(np.pi * s * x)
        return e

    ex, ey = basis(pos[:, 0]), basis(pos[:, 1])
    return np.einsum("...nk,nk->...n", np.matmul(ex, coef), ey).real
