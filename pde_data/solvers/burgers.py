"""Viscous Burgers data generator (the FNO ``burgers_data_R10`` recipe), deterministic by seed.

PDE
    ``u_t + (u^2 / 2)_x = nu u_xx`` on the periodic interval ``(0, 1)``; the operator maps
    ``u0 = u(., 0)`` to ``u(., t_final)``. Paper values (FNO, Li et al. 2020): ``nu = 0.1``,
    ``t_final = 1``, reference solved on 8192 points and subsampled (:data:`BURGERS_DEFAULTS`).

Initial field
    ``u0 ~ N(0, sigma^2 (-Laplacian + tau^2 I)^(-alpha))`` with ``sigma^2 = 625``, ``tau = 5``,
    ``alpha = 2``, i.e. ``N(0, 625 (-Delta + 25 I)^-2)``, expanded in the orthonormal Fourier basis
    ``sqrt(2) cos(2 pi k x)``, ``sqrt(2) sin(2 pi k x)``, ``k = 1 .. ceil(n/2) - 1`` with standard
    deviations ``sigma (4 pi^2 k^2 + tau^2)^(-alpha/2)``. The mean mode is zero, as in FNO's
    ``GRF1`` / ``GaussianRF`` samplers. Normals are drawn mode by mode, so the low modes of a sample
    are the same at every grid size.

Discretisation
    Pseudo-spectral on ``n`` points ``x_i = i / n``, ``i = 0 .. n-1`` (endpoint excluded), the
    nonlinear term ``-(1/2) d/dx (u^2)`` evaluated in physical space and dealiased with the 2/3 rule
    (modes ``|k| <= (n-1) // 3`` kept), time stepping by integrating-factor RK4 (the viscous term is
    integrated exactly, so a single small-amplitude mode decays exactly as ``exp(-nu (2 pi k)^2 t)``).
    The spatial mean (mode 0) is left untouched by every stage and is conserved to round-off.

Storage convention
    Fields are ``(n_samples, r)`` arrays on ``x_i = i / r`` (FNO ``a``, ``u`` layout); restriction
    from the solve grid ``S`` is exact slicing ``fine[:, ::S // r]``. :func:`generate_burgers_trajectories`
    returns the neuraloperator time-series layout instead: ``x`` ``(n, r)`` and ``y`` ``(n, T, r)`` (time
    before space, ``y[:, 0] == x``).

Regime of the defaults (against the papers' protocols; presets in :mod:`sciattn.pde_data.presets`)
    The defaults are the FNO paper's stated values (preset ``fno_burgers``). In that regime the flow is
    almost linear: with ``nu = 0.1`` the solution's std falls from about 0.36 to 0.005 by ``t = 1`` and
    ``u(1)`` is within 6.6% of the pure heat-equation solution (issue 26), so the operator is close to a
    Fourier multiplier. neuraloperator's bundled ``burgers_{train,test}_16.pt`` are a different, more
    nonlinear regime: ``nu = 0.01``, 17 snapshots on ``t in [0, 0.96]`` and a much smoother initial law,
    standard deviations ``629 (4 pi^2 k^2 + 25)^(-2)`` (``alpha = 4``; fitted, :mod:`.burgers_neuralop`,
    preset ``neuralop_burgers``), over which the energy falls to 31%.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from sciattn._checks import check_finite, check_positive_int

from .._hdf5 import cached_pairs
from .darcy import _check_real, _check_resolutions, _check_seed

__all__ = [
    "BURGERS_DEFAULTS",
    "sample_burgers_initial",
    "solve_burgers",
    "generate_burgers",
    "generate_burgers_trajectories",
    "load_or_generate_burgers",
]

#: FNO paper parameters (``nu = 0.1``, ``u0 ~ N(0, 625 (-Delta + 25 I)^-2)``, ``t_final = 1``) and dt.
BURGERS_DEFAULTS: dict[str, float] = {
    "nu": 0.1,
    "t_final": 1.0,
    "dt": 1e-4,
    "sigma": 25.0,
    "tau": 5.0,
    "alpha": 2.0,
}

_CACHE_FORMAT = 1


def _check_fine(fine_resolution: object, resolutions: list[int], *, even: bool = False) -> int:
    fine = max(resolutions) if fine_resolution is None else fine_resolution
    if isinstance(fine, np.integer):
        fine = int(fine)
    fine = check_positive_int("fine_resolution", fine)
    if fine < 4 or (even and fine % 2):
        raise ValueError(f"fine_resolution: expected {'an even' if even else 'an'} int >= 4, got {fine}")
    bad = [r for r in resolutions if fine % r != 0]
    if bad:
        raise ValueError(
            f"resolutions: expected every resolution to divide fine_resolution={fine}, got {bad} that do not"
        )
    return fine


def _as_field(name: str, value: object, ranks: tuple[int, ...], layout: str) -> tuple[torch.Tensor, bool]:
    """Return ``(float64 tensor, was_numpy)`` for a real, finite field of rank in ``ranks``."""
    was_numpy = isinstance(value, np.ndarray)
    if was_numpy:
        if not np.issubdtype(value.dtype, np.number) or np.iscomplexobj(value):
            raise TypeError(f"{name}: expected a real numeric array, got dtype {value.dtype}")
        value = torch.from_numpy(np.asarray(value, dtype=np.float64))
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(value).__name__}")
    if value.is_complex():
        raise TypeError(f"{name}: expected a real tensor, got dtype {value.dtype}")
    if value.dim() not in ranks or value.shape[-1] < 4:
        raise ValueError(
            f"{name}: expected a field {layout} with >= 4 points a side, got shape {tuple(value.shape)}"
        )
    t = value.detach().to(dtype=torch.float64)
    check_finite(name, t)
    return t, was_numpy


@contextmanager
def _small_fft_threads(numel: int, limit: int = 1 << 17) -> Iterator[None]:
    """Run small batched FFT loops on one intra-op thread (restored afterwards).

    Multi-threaded torch FFTs of a few thousand points spend far longer synchronising than
    computing (measured 30-50x slower per ``irfft`` of 16 x 1024 on 2 cores).
    """
    before = torch.get_num_threads()
    if numel <= limit and before > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _n_steps(span: float, dt: float) -> int:
    q = span / dt
    return max(1, round(q)) if abs(q - round(q)) <= 1e-9 * max(1.0, q) else math.ceil(q)


# --------------------------------------------------------------------------- initial field


def sample_burgers_initial(
    n: int,
    n_points: int,
    *,
    rng: np.random.Generator,
    sigma: float = 25.0,
    tau: float = 5.0,
    alpha: float = 2.0,
) -> np.ndarray:
    """Draw ``n`` zero-mean periodic fields from ``N(0, sigma^2 (-Delta + tau^2 I)^(-alpha))``.

    For each mode ``k = 1 .. K`` (``K = ceil(n_points / 2) - 1``, the Nyquist mode is left out) two
    normals ``(a_k, b_k)`` are drawn and the field is
    ``sum_k s_k (a_k sqrt(2) cos(2 pi k x) + b_k sqrt(2) sin(2 pi k x))``,
    ``s_k = sigma (4 pi^2 k^2 + tau^2)^(-alpha/2)``, evaluated on ``x_i = i / n_points``.
    Defaults are the FNO paper's ``N(0, 625 (-Delta + 25 I)^-2)``.

    Returns:
        ``(n, n_points)`` float64 array.
    """
    n = check_positive_int("n", n)
    n_points = check_positive_int("n_points", n_points)
    if n_points < 4:
        raise ValueError(f"n_points: expected an int >= 4, got {n_points}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    sigma, tau, alpha = (_check_real(k, v) for k, v in (("sigma", sigma), ("tau", tau), ("alpha", alpha)))
    K = (n_points - 1) // 2
    k = np.arange(1, K + 1, dtype=np.float64)
    std = sigma * (4.0 * np.pi**2 * k**2 + tau**2) ** (-alpha / 2.0)
    out = np.empty((n, n_points), dtype=np.float64)
    spec = np.zeros(n_points // 2 + 1, dtype=np.complex128)
    for i in range(n):
        xi = rng.standard_normal((K, 2))
        # irfft: u = (1/n) sum X_k e^{2 pi i k x} + c.c.; X_k = n s_k (a - i b) / sqrt(2) gives the sum above
        spec[1 : K + 1] = n_points * std * (xi[:, 0] - 1j * xi[:, 1]) / math.sqrt(2.0)
        out[i] = np.fft.irfft(spec, n_points)
    return out


# --------------------------------------------------------------------------- solver


def _if_rk4(v: torch.Tensor, n: int, nu: float, dt: float, steps: int) -> torch.Tensor:
    """``steps`` integrating-factor RK4 steps of the rfft coefficients ``v`` (B, n//2+1)."""
    m = torch.arange(n // 2 + 1, dtype=torch.float64, device=v.device)
    k = 2.0 * math.pi * m
    keep = (m <= (n - 1) // 3).to(torch.float64)
    g = (-0.5j * dt) * k * keep  # dt * (-(1/2) d/dx) on the dealiased modes
    e_half = torch.exp(-nu * k**2 * dt / 2.0).to(torch.complex128)
    e_full = e_half * e_half

    def nl(z: torch.Tensor) -> torch.Tensor:
        return g * torch.fft.rfft(torch.fft.irfft(z, n) ** 2)

    for _ in range(steps):
        a = nl(v)
        b = nl(e_half * (v + a / 2))
        c = nl(e_half * v + b / 2)
        d = nl(e_full * v + e_half * c)
        v = e_full * v + (e_full * a + 2.0 * e_half * (b + c) + d) / 6.0
    return v


def solve_burgers(
    u0: torch.Tensor | np.ndarray,
    *,
    nu: float,
    t_final: float,
    dt: float,
    record_times: Sequence[float] | None = None,
) -> torch.Tensor | np.ndarray:
    """Integrate periodic viscous Burgers ``u_t + u u_x = nu u_xx`` on ``(0, 1)``.

    Pseudo-spectral, 2/3-rule dealiasing, integrating-factor RK4 (see the module docstring). Each
    interval between output times is split into ``ceil(span / dt)`` equal steps (``<= dt``).

    Args:
        u0: ``(n,)`` or ``(B, n)`` initial values on ``x_i = i / n`` (torch or numpy, computed in
            float64).
        nu: viscosity (``>= 0``).
        t_final: final time (``> 0``).
        dt: maximal time step (``> 0``).
        record_times: optional non-decreasing times in ``[0, t_final]`` to return.

    Returns:
        ``u(., t_final)`` shaped like ``u0``; with ``record_times`` an array ``(..., n, T)`` (time
        last). A numpy input gives a numpy float64 output, a tensor input a float64 tensor.
    """
    u, was_numpy = _as_field("u0", u0, (1, 2), "(n,) or (B, n)")
    was_1d = u.dim() == 1
    u = u[None] if was_1d else u
    nu = _check_real("nu", nu, positive=False)
    if nu < 0:
        raise ValueError(f"nu: expected a non-negative number, got {nu}")
    t_final = _check_real("t_final", t_final)
    dt = _check_real("dt", dt)
    if record_times is None:
        times = [t_final]
    else:
        times = [_check_real("record_times", t, positive=False) for t in np.atleast_1d(record_times)]
        if not times or any(t < 0 or t > t_final for t in times) or any(np.diff(times) < 0):
            raise ValueError(
                f"record_times: expected non-decreasing times in [0, t_final={t_final}], got {times}"
            )
    n = u.shape[-1]
    v = torch.fft.rfft(u)
    out, t_now = [], 0.0
    with _small_fft_threads(u.numel()):
        for t in times:
            if t > t_now:
                steps = _n_steps(t - t_now, dt)
                v = _if_rk4(v, n, nu, (t - t_now) / steps, steps)
                t_now = t
            out.append(torch.fft.irfft(v, n))
    res = out[0] if record_times is None else torch.stack(out, dim=-1)
    if was_1d:
        res = res[0]
    return res.numpy() if was_numpy else res


# --------------------------------------------------------------------------- generation


def _check_params(**p: float) -> dict[str, float]:
    return {k: _check_real(k, v) for k, v in p.items()}


def generate_burgers(
    n_samples: int,
    resolutions: Iterable[int],
    *,
    fine_resolution: int | None = None,
    seed: int = 0,
    nu: float = 0.1,
    t_final: float = 1.0,
    dt: float = 1e-4,
    sigma: float = 25.0,
    tau: float = 5.0,
    alpha: float = 2.0,
    batch_size: int = 64,
    progress: bool = False,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Generate Burgers pairs ``(a, u) = (u(., 0), u(., t_final))`` at several resolutions.

    Sample ``i`` draws its initial field on the ``S = fine_resolution`` grid with
    ``numpy.random.default_rng([seed, i])`` (so it does not depend on ``n_samples``); the samples
    are solved once at ``S`` in batches of ``batch_size`` by :func:`solve_burgers` and restricted to
    each resolution by slicing ``[:, ::S // r]``. (Batched FFTs make a solution independent of its
    batch neighbours up to float64 round-off.) The paper solved at ``S = 8192``.

    Returns:
        ``{r: (a, u)}`` float32 arrays of shape ``(n_samples, r)`` (the FNO ``a``/``u`` layout).
    """
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    S = _check_fine(fine_resolution, res)
    seed = _check_seed(seed)
    batch_size = check_positive_int("batch_size", batch_size)
    p = _check_params(nu=nu, t_final=t_final, dt=dt, sigma=sigma, tau=tau, alpha=alpha)

    a = np.stack(
        [
            sample_burgers_initial(
                1, S, rng=np.random.default_rng([seed, i]), sigma=p["sigma"], tau=p["tau"], alpha=p["alpha"]
            )[0]
            for i in range(n_samples)
        ]
    )
    u = np.empty_like(a)
    starts: Iterable[int] = range(0, n_samples, batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, total=-(-n_samples // batch_size), desc=f"Burgers S={S}", unit="batch")
    for s0 in starts:
        sl = slice(s0, s0 + batch_size)
        u[sl] = solve_burgers(a[sl], nu=p["nu"], t_final=p["t_final"], dt=p["dt"])
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in res:
        step = S // r
        out[r] = (
            np.ascontiguousarray(a[:, ::step], dtype=np.float32),
            np.ascontiguousarray(u[:, ::step], dtype=np.float32),
        )
    return out


def generate_burgers_trajectories(
    n_samples: int,
    resolution: int,
    *,
    n_times: int = 17,
    fine_resolution: int | None = None,
    seed: int = 0,
    nu: float = 0.1,
    t_final: float = 1.0,
    dt: float = 1e-4,
    sigma: float = 25.0,
    tau: float = 5.0,
    alpha: float = 2.0,
    batch_size: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """Burgers time series in neuraloperator's ``burgers_*_16.pt`` layout: ``n_times`` snapshots on ``[0, t_final]``.

    Same samples and seeding as :func:`generate_burgers` (sample ``i`` from ``default_rng([seed, i])`` on the
    ``S = fine_resolution`` grid, default ``S = resolution``), solved by :func:`solve_burgers` with
    ``record_times = linspace(0, t_final, n_times)`` and restricted by slicing ``[:, ::S // resolution]``.

    Returns:
        ``(x, y)`` float64: ``x`` ``(n_samples, resolution)`` the initial field, ``y``
        ``(n_samples, n_times, resolution)`` the solution at the ``n_times`` times (``y[:, 0] == x``).
    """
    n_samples = check_positive_int("n_samples", n_samples)
    r = check_positive_int("resolution", resolution)
    n_times = check_positive_int("n_times", n_times)
    if n_times < 2:
        raise ValueError(f"n_times: expected an int >= 2 (t = 0 and t_final), got {n_times}")
    S = _check_fine(fine_resolution, [r])
    seed = _check_seed(seed)
    batch_size = check_positive_int("batch_size", batch_size)
    p = _check_params(nu=nu, t_final=t_final, dt=dt, sigma=sigma, tau=tau, alpha=alpha)
    a = np.stack([
        sample_burgers_initial(1, S, rng=np.random.default_rng([seed, i]), sigma=p["sigma"], tau=p["tau"],
                               alpha=p["alpha"])[0]
        for i in range(n_samples)
    ])
    times = np.linspace(0.0, p["t_final"], n_times)
    y = np.empty((n_samples, n_times, r), dtype=np.float64)
    for s0 in range(0, n_samples, batch_size):
        sol = solve_burgers(a[s0 : s0 + batch_size], nu=p["nu"], t_final=p["t_final"], dt=p["dt"], record_times=times)
        y[s0 : s0 + batch_size] = np.swapaxes(sol[:, :: S // r, :], 1, 2)
    y[:, 0] = a[:, :: S // r]  # exact: the recorded t = 0 is the initial field up to an FFT round trip
    return np.ascontiguousarray(a[:, :: S // r]), y


# --------------------------------------------------------------------------- cache


def _meta(module: str, n_samples: int, res: list[int], fine: int, seed: int, p: Mapping[str, object]) -> dict:
    return {
        "generator": f"sciattn.pde_data.{module}",
        "format": _CACHE_FORMAT,
        "n_samples": n_samples,
        "resolutions": sorted(res),
        "fine_resolution": fine,
        "seed": seed,
        **{k: p[k] for k in sorted(p)},
    }


def load_or_generate_burgers(
    cache_dir: str | os.PathLike,
    n_samples: int,
    resolutions: Iterable[int],
    *,
    fine_resolution: int | None = None,
    seed: int = 0,
    batch_size: int = 64,
    progress: bool = False,
    **params: float,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Return :func:`generate_burgers`'s output, cached as one HDF5 file in ``cache_dir``.

    The file ``burgers_<hash>.h5`` is named by a hash of ``n_samples``, the resolutions,
    ``fine_resolution``, ``seed`` and ``params`` (any of :data:`BURGERS_DEFAULTS`, defaults for the
    rest); it holds ``a_{r}``, ``u_{r}`` ``(n_samples, r)`` float32 and every parameter as a root
    attribute, and is written atomically. A file whose attributes differ from the request is
    regenerated with a warning.
    """
    unknown = sorted(set(params) - set(BURGERS_DEFAULTS))
    if unknown:
        raise TypeError(f"params: expected keywords among {sorted(BURGERS_DEFAULTS)}, got unknown {unknown}")
    n_samples = check_positive_int("n_samples", n_samples)
    res = _check_resolutions(resolutions)
    fine = _check_fine(fine_resolution, res)
    seed = _check_seed(seed)
    p = _check_params(**{**BURGERS_DEFAULTS, **params})
    kw = {"fine_resolution": fine, "seed": seed, "batch_size": batch_size, "progress": progress}
    return cached_pairs(
        cache_dir,
        "burgers",
        _meta("burgers", n_samples, res, fine, seed, p),
        res,
        lambda: generate_burgers(n_samples, res, **kw, **p),
    )
