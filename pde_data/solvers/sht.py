"""Real spherical harmonic transform on latitude–longitude grids, with vector calculus by spectral identities.

Basis
    Orthonormal spherical harmonics on the unit sphere without the Condon–Shortley phase,
    ``Y_l^m(θ, λ) = P̄_l^m(cos θ) e^{imλ}`` with ``∫_{S²} Y_l^m conj(Y_l'^m') dΩ = δ_ll' δ_mm'``
    (``θ`` colatitude, ``λ`` longitude). A real field is

        f(θ, λ) = Σ_{l<lmax} [ f_l0 P̄_l^0 + 2 Re Σ_{0<m<min(l+1, mmax)} f_lm P̄_l^m e^{imλ} ],

    and only ``m >= 0`` is stored: coefficients are complex ``(..., lmax, mmax)``, zero for ``m > l``.

Legendre functions
    Float64 three-term recurrence of the normalised functions (stable for any degree; no factorials):
    ``P̄_0^0 = 1/√(4π)``, ``P̄_m^m = √((2m+1)/(2m)) sin θ P̄_{m-1}^{m-1}``,
    ``P̄_{m+1}^m = √(2m+3) cos θ P̄_m^m``,
    ``P̄_l^m = a_lm (cos θ P̄_{l-1}^m − b_lm P̄_{l-2}^m)`` with ``a_lm = √((4l²−1)/(l²−m²))``,
    ``b_lm = √(((l−1)²−m²)/(4(l−1)²−1))``. The same recurrence started from ``P̄_m^m / sin θ`` gives
    ``Q_l^m = P̄_l^m / sin θ`` (``m >= 1``) without dividing by ``sin θ``, so poles are regular; then
    ``dP̄_l^m/dθ = l cos θ Q_l^m − √((l²−m²)(2l+1)/(2l−1)) Q_{l−1}^m`` (``m >= 1``) and
    ``dP̄_l^0/dθ = −√(l(l+1)) P̄_l^1``.

Transforms
    Synthesis: ``F_m(θ_k) = Σ_l f_lm P̄_l^m(θ_k)``, then ``f = irfft(F, nlon, norm="forward")``.
    Analysis: ``F_m(θ_k) = rfft(f, norm="forward")_m``, ``f_lm = 2π Σ_k w_k P̄_l^m(θ_k) F_m(θ_k)`` with the
    grid's latitude weights ``w_k`` for ``∫_{-1}^{1} · d(cos θ)`` (:func:`sciattn.quadrature.sphere_quadrature`).
    Analysis inverts synthesis exactly when the quadrature integrates ``P̄_l^m P̄_l'^m`` (a polynomial of
    degree ``l + l'`` in ``cos θ``) exactly, i.e. for ``lmax <=`` :func:`exact_lmax`: ``nlat`` on the
    Legendre–Gauss grid (exact to degree ``2 nlat − 1``), ``nlat − 1`` on Lobatto (``2 nlat − 3``) and
    ``(nlat + 1) // 2`` on the equiangular Clenshaw–Curtis grid (``nlat − 1``). Longitudes need
    ``mmax <= (nlon + 1) // 2`` (no Nyquist mode).

Vector calculus (sphere of radius ``a``; vectors as eastward ``u`` and northward ``v`` components)
    ``∇f = (1/a)(∂_λ f / sin θ, −∂_θ f)``; Helmholtz ``(u, v) = ∇χ + k̂ × ∇ψ`` with vorticity
    ``ζ = ∇²ψ`` and divergence ``δ = ∇²χ`` and ``∇² Y_l^m = −l(l+1)/a² Y_l^m``. Divergence and vorticity of a
    gridded vector field are analysed by integration by parts, ``δ_lm = −∫ (u, v)·∇ conj(Y_l^m) dA``,
    ``ζ_lm = ∫ (k̂ × (u, v))·∇ conj(Y_l^m) dA`` (coefficients for the unit-sphere basis: ``dA`` taken on the
    unit sphere), so no derivative of the data is ever formed on the grid; with ``A_θ = −v``, ``A_λ = u``:

        δ_lm = −(2π/a) Σ_k w_k [Â_θ,m dP̄_l^m/dθ − i m Â_λ,m Q_l^m],
        ζ_lm = −(2π/a) Σ_k w_k [Â_λ,m dP̄_l^m/dθ + i m Â_θ,m Q_l^m].

    The ``l = 0`` coefficients of both are exactly zero (``dP̄_0^0/dθ = 0``), which is what makes the
    shallow-water solver conserve mass to round-off.

Shapes:
    grid fields ``(..., nlat, nlon)`` real; coefficients ``(..., lmax, mmax)`` complex; vector fields as a
    pair ``(u, v)`` of grid fields.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sciattn._checks import check_choice, check_positive_int, check_rank
from sciattn.domain import SphereGrid
from sciattn.quadrature import sphere_quadrature

__all__ = ["SHT_GRIDS", "exact_lmax", "legendre_tables", "SphericalHarmonicTransform"]

SHT_GRIDS = ("equiangular", "legendre-gauss", "lobatto")


def exact_lmax(nlat: int, grid: str) -> int:
    """Largest ``lmax`` for which analysis inverts synthesis exactly on an ``nlat``-row ``grid`` (see module)."""
    check_positive_int("nlat", nlat)
    check_choice("grid", grid, SHT_GRIDS)
    if grid == "legendre-gauss":
        return nlat
    if grid == "lobatto":
        return nlat - 1
    return (nlat + 1) // 2


def legendre_tables(lmax: int, mmax: int, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``P̄_l^m``, ``dP̄_l^m/dθ`` and ``Q_l^m = P̄_l^m / sin θ`` (0 for ``m = 0``) at colatitudes ``theta``.

    Returns three float64 arrays ``(mmax, lmax, len(theta))``, zero where ``l < m``.
    """
    theta = np.asarray(theta, dtype=np.float64)
    x, s = np.cos(theta), np.sin(theta)
    x[theta == 0.0], s[theta == 0.0] = 1.0, 0.0  # exact poles
    x[theta == math.pi], s[theta == math.pi] = -1.0, 0.0
    mtab = max(mmax, 2)  # dP̄_l^0/dθ needs the m = 1 series
    p = np.zeros((mtab, lmax, theta.size))
    q = np.zeros_like(p)
    pmm = np.full(theta.size, 1.0 / math.sqrt(4.0 * math.pi))  # P̄_m^m
    qmm = np.zeros(theta.size)  # P̄_m^m / sin θ (m >= 1)
    for m in range(mtab):
        if m == 1:
            qmm = pmm * math.sqrt(1.5)  # P̄_1^1 / sin θ = √(3/2) P̄_0^0
        elif m > 1:
            qmm = qmm * s * math.sqrt((2 * m + 1) / (2 * m))
        if m > 0:
            pmm = pmm * s * math.sqrt((2 * m + 1) / (2 * m))
        if m >= lmax:
            continue
        for table, start in ((p, pmm), (q, qmm if m > 0 else np.zeros(theta.size))):
            table[m, m] = start
            if m + 1 < lmax:
                table[m, m + 1] = math.sqrt(2 * m + 3) * x * start
            for l in range(m + 2, lmax):  # noqa: E741
                a = math.sqrt((4 * l * l - 1) / (l * l - m * m))
                b = math.sqrt(((l - 1) ** 2 - m * m) / (4 * (l - 1) ** 2 - 1))
                table[m, l] = a * (x * table[m, l - 1] - b * table[m, l - 2])
    dp = np.zeros_like(p)
    ell = np.arange(lmax, dtype=np.float64)[:, None]
    dp[0] = -np.sqrt(ell * (ell + 1)) * p[1]
    for m in range(1, mtab):
        c = np.sqrt(np.clip((ell**2 - m * m) * (2 * ell + 1) / np.maximum(2 * ell - 1, 1), 0.0, None))
        q_prev = np.concatenate([np.zeros((1, theta.size)), q[m, :-1]], axis=0)
        dp[m] = ell * x * q[m] - c * q_prev
        dp[m, :m] = 0.0
    return p[:mmax], dp[:mmax], q[:mmax]


class SphericalHarmonicTransform:
    """Forward (analysis) and inverse (synthesis) real SHT of one grid, plus gradient, divergence, vorticity
    and velocity-from-(vorticity, divergence) for a sphere of radius ``radius`` (see the module docstring).

    Args:
        nlat, nlon: grid size; ``grid`` one of :data:`SHT_GRIDS` (nodes and weights from
            :func:`sciattn.quadrature.sphere_quadrature`, longitudes ``2π j / nlon``).
        lmax, mmax: degrees ``l < lmax`` and orders ``m < mmax``; defaults ``lmax =`` :func:`exact_lmax`,
            ``mmax = min(lmax, (nlon + 1) // 2)``.
        radius: sphere radius ``a`` of the vector operators (the coefficients are for the unit-sphere basis).
        dtype: real dtype of grid fields (tables are computed in float64, then cast); complex coefficients
            use the matching complex dtype.

    Shapes:
        :meth:`forward` ``(..., nlat, nlon) -> (..., lmax, mmax)``; :meth:`inverse` the reverse;
        :meth:`div_curl` ``(u, v) -> (δ_lm, ζ_lm)``; :meth:`velocity` ``(ζ_lm, δ_lm) -> (u, v)``.
    """

    def __init__(
        self,
        nlat: int,
        nlon: int,
        grid: str = "equiangular",
        *,
        lmax: int | None = None,
        mmax: int | None = None,
        radius: float = 1.0,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ):
        self.sphere = SphereGrid(check_positive_int("nlat", nlat), check_positive_int("nlon", nlon),
                                 check_choice("grid", grid, SHT_GRIDS))
        self.nlat, self.nlon, self.grid = nlat, nlon, grid
        self.lmax = exact_lmax(nlat, grid) if lmax is None else check_positive_int("lmax", lmax)
        if self.lmax > nlat:
            raise ValueError(f"lmax: expected at most nlat={nlat}, got {self.lmax}")
        m_limit = (nlon + 1) // 2
        self.mmax = min(self.lmax, m_limit) if mmax is None else check_positive_int("mmax", mmax)
        if self.mmax > min(self.lmax, m_limit):
            raise ValueError(
                f"mmax: expected at most min(lmax, (nlon + 1) // 2) = {min(self.lmax, m_limit)}, got {self.mmax}"
            )
        if not (isinstance(radius, (int, float)) and radius > 0 and math.isfinite(radius)):
            raise ValueError(f"radius: expected a positive finite number, got {radius!r}")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype: expected torch.float32 or torch.float64, got {dtype}")
        self.radius, self.dtype, self.device = float(radius), dtype, torch.device(device or "cpu")
        self.cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        theta, w = sphere_quadrature(nlat, grid, torch.float64)
        p, dp, q = legendre_tables(self.lmax, self.mmax, theta.numpy())
        wq = 2.0 * math.pi * w.numpy()
        as_t = lambda a: torch.as_tensor(a, dtype=dtype, device=self.device)  # noqa: E731
        self.colatitudes, self.lat_weights = as_t(theta.numpy()), as_t(w.numpy())
        self.pct, self.dpct, self.qct = as_t(p), as_t(dp), as_t(q)  # (mmax, lmax, nlat)
        self.wpct, self.wdpct, self.wqct = as_t(p * wq), as_t(dp * wq), as_t(q * wq)
        ell = torch.arange(self.lmax, dtype=torch.float64)
        self.l_times_l1 = as_t((ell * (ell + 1))[:, None].expand(self.lmax, self.mmax).numpy())
        inv = torch.zeros(self.lmax, dtype=torch.float64)
        inv[1:] = -1.0 / (ell[1:] * (ell[1:] + 1))
        self._inv_lap_unit = as_t(inv[:, None].expand(self.lmax, self.mmax).numpy())  # -1/(l(l+1)), 0 at l=0
        self._im = torch.arange(self.mmax, device=self.device).to(self.cdtype) * 1j

    # ------------------------------------------------------------------ checks and Legendre sums
    def _check_grid(self, name: str, f: torch.Tensor) -> torch.Tensor:
        check_rank(name, f, range(2, 10), "(..., nlat, nlon)")
        if tuple(f.shape[-2:]) != (self.nlat, self.nlon):
            raise ValueError(f"{name}: expected trailing shape ({self.nlat}, {self.nlon}), got {tuple(f.shape)}")
        if f.is_complex():
            raise TypeError(f"{name}: expected a real tensor, got dtype {f.dtype}")
        return f.to(dtype=self.dtype, device=self.device)

    def _check_coeffs(self, name: str, c: torch.Tensor) -> torch.Tensor:
        check_rank(name, c, range(2, 10), "(..., lmax, mmax)")
        if tuple(c.shape[-2:]) != (self.lmax, self.mmax):
            raise ValueError(f"{name}: expected trailing shape ({self.lmax}, {self.mmax}), got {tuple(c.shape)}")
        return c.to(dtype=self.cdtype, device=self.device)

    def _fourier(self, f: torch.Tensor) -> torch.Tensor:
        """``(..., nlat, nlon)`` real -> ``(..., nlat, mmax)`` complex Fourier coefficients (norm forward)."""
        return torch.fft.rfft(f, dim=-1, norm="forward")[..., : self.mmax]

    def _to_grid(self, fm: torch.Tensor) -> torch.Tensor:
        """``(..., nlat, mmax)`` Fourier coefficients -> ``(..., nlat, nlon)`` real field."""
        full = fm.new_zeros(*fm.shape[:-1], self.nlon // 2 + 1)
        full[..., : self.mmax] = fm
        return torch.fft.irfft(full, n=self.nlon, dim=-1, norm="forward")

    @staticmethod
    def _analyse(fm: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """``Σ_k table[m, l, k] fm[..., k, m]`` -> ``(..., lmax, mmax)``."""
        out = torch.einsum("...kmc,mlk->...lmc", torch.view_as_real(fm), table)
        return torch.view_as_complex(out.contiguous())

    @staticmethod
    def _synthesise(c: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """``Σ_l c[..., l, m] table[m, l, k]`` -> ``(..., nlat, mmax)``."""
        out = torch.einsum("...lmc,mlk->...kmc", torch.view_as_real(c), table)
        return torch.view_as_complex(out.contiguous())

    # ------------------------------------------------------------------ scalar transforms
    def forward(self, f: torch.Tensor) -> torch.Tensor:
        """Analysis ``f_lm = ∫ f conj(Y_l^m) dΩ`` by the grid's quadrature: ``(..., nlat, nlon) -> (..., lmax, mmax)``."""
        return self._analyse(self._fourier(self._check_grid("f", f)), self.wpct)

    def inverse(self, c: torch.Tensor) -> torch.Tensor:
        """Synthesis ``Σ f_lm Y_l^m`` (real part convention above): ``(..., lmax, mmax) -> (..., nlat, nlon)``."""
        return self._to_grid(self._synthesise(self._check_coeffs("c", c), self.pct))

    def laplacian(self, c: torch.Tensor) -> torch.Tensor:
        """Coefficients of ``∇² f``: ``−l(l+1)/a² f_lm``."""
        return -self.l_times_l1 / self.radius**2 * self._check_coeffs("c", c)

    def inverse_laplacian(self, c: torch.Tensor) -> torch.Tensor:
        """Coefficients of the zero-mean solution ``g`` of ``∇² g = f``: ``−a² f_lm / (l(l+1))``, ``g_00 = 0``."""
        return self.radius**2 * self._inv_lap_unit * self._check_coeffs("c", c)

    # ------------------------------------------------------------------ vector calculus
    def _vector_from_potentials(self, chi: torch.Tensor, psi: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u, v)`` of ``∇χ + k̂ × ∇ψ`` from coefficients of ``χ`` and ``ψ`` (``None`` = 0)."""
        im = self._im
        a_theta = self._synthesise(chi, self.dpct)
        a_lam = im * self._synthesise(chi, self.qct)
        if psi is not None:
            a_theta = a_theta - im * self._synthesise(psi, self.qct)
            a_lam = a_lam + self._synthesise(psi, self.dpct)
        return self._to_grid(a_lam) / self.radius, -self._to_grid(a_theta) / self.radius

    def gradient(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``∇f = (u, v)`` (eastward, northward) on the grid from the coefficients of ``f``."""
        return self._vector_from_potentials(self._check_coeffs("c", c), None)

    def velocity(self, vorticity: torch.Tensor, divergence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u, v) = ∇χ + k̂ × ∇ψ`` with ``∇²ψ = ζ``, ``∇²χ = δ`` (zero-mean potentials), from coefficients."""
        psi = self.inverse_laplacian(self._check_coeffs("vorticity", vorticity))
        chi = self.inverse_laplacian(self._check_coeffs("divergence", divergence))
        return self._vector_from_potentials(chi, psi)

    def div_curl(self, u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Coefficients ``(δ_lm, ζ_lm)`` of ``∇·(u, v)`` and ``k̂·∇×(u, v)`` by the quadrature in the module docstring."""
        u, v = self._check_grid("u", u), self._check_grid("v", v)
        if u.shape != v.shape:
            raise ValueError(f"u, v: expected equal shapes, got {tuple(u.shape)} and {tuple(v.shape)}")
        a_theta, a_lam = self._fourier(-v), self._fourier(u)
        im, scale = self._im, -1.0 / self.radius
        div = self._analyse(a_theta, self.wdpct) - im * self._analyse(a_lam, self.wqct)
        curl = self._analyse(a_lam, self.wdpct) + im * self._analyse(a_theta, self.wqct)
        return scale * div, scale * curl

    def integrate(self, f: torch.Tensor) -> torch.Tensor:
        """``∫ f dA = a² Σ_kj (2π w_k / nlon) f_kj`` over the sphere of radius ``a``: ``(..., nlat, nlon) -> (...)``."""
        f = self._check_grid("f", f)
        return (f.mean(-1) * self.lat_weights).sum(-1) * (2.0 * math.pi * self.radius**2)

    def __repr__(self) -> str:
        return (f"SphericalHarmonicTransform(nlat={self.nlat}, nlon={self.nlon}, grid={self.grid!r}, "
                f"lmax={self.lmax}, mmax={self.mmax}, radius={self.radius})")
