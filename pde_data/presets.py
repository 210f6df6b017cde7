"""Named presets: the papers' data protocols as parameters of the built-in generators.

A preset names a generator of :mod:`sciattn.pde_data.generate` (``darcy``, ``burgers``, ``navier_stokes``,
``shallow_water``), the generator keywords of a published protocol, the protocol's stored resolution and sizes,
and where the values come from. The generators' own defaults are not always the protocol (see the table in
``docs/data.md``); a preset is.

Use:

- ``sciattn data generate PRESET --n N --resolution R --out DIR`` writes ``DIR/PRESET_R.nc`` (the generator's
  NetCDF layout, with ``preset`` and ``preset_source`` attributes); ``--param KEY=VALUE`` overrides a value.
  Train on the written file with ``[data] train = "DIR/PRESET_R.nc"``.
- :func:`load_preset` builds arrays in memory: ``{"x", "y", "preset", "generator", "params"}``.

Names (stable; benchmarks use them): ``fno_burgers``, ``neuralop_burgers``, ``fno_navier_stokes``,
``fno_darcy``, ``bonev_shallow_water``. ``fno_burgers`` and ``fno_darcy`` are also the names of the registered
*real-file* benchmarks (``sciattn.pde_data.load("fno_darcy")`` reads FNO's ``.mat`` files); a preset is the
generated counterpart and is reached only through this module and ``sciattn data generate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from sciattn._checks import check_positive_int

__all__ = ["Preset", "PRESETS", "get_preset", "generator_call", "load_preset", "describe_presets"]


@dataclass(frozen=True)
class Preset:
    """A published data protocol.

    ``generator``: the :data:`sciattn.pde_data.generate.GENERATORS` name; ``params``: its keywords (including
    ``fine_resolution``, the solve grid, where the protocol has one); ``resolution``: the stored points per
    axis of the protocol (``nlat`` on the sphere); ``protocol``: sizes and splits of the paper, not generator
    keywords; ``description``: the regime in one line; ``source``: where the values come from.
    """

    name: str
    generator: str
    params: Mapping[str, object]
    resolution: int
    protocol: Mapping[str, object]
    description: str
    source: str
    small: Mapping[str, object] = field(default_factory=dict)  # overrides of a quick build (tests, smoke runs)


def _frozen(d: dict) -> Mapping[str, object]:
    return MappingProxyType(dict(d))


PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset(
        "fno_burgers", "burgers",
        _frozen({"nu": 0.1, "t_final": 1.0, "dt": 1e-4, "sigma": 25.0, "tau": 5.0, "alpha": 2.0,
                 "fine_resolution": 8192}),
        1024,
        _frozen({"n_train": 1000, "n_test": 100, "split": "first 1000 / last 100 of 2048", "input": "u(., 0)",
                 "output": "u(., 1)"}),
        "FNO paper's Burgers (burgers_data_R10): nu = 0.1, u0 ~ N(0, 625 (-Delta + 25 I)^-2), u(., 1), solved at "
        "8192 and subsampled; almost linear decay (std 0.36 -> 0.005). These are sciattn's burgers defaults.",
        "Li et al. 2020 (FNO), sec. 5.1; fourier_1d.py (ntrain 1000, ntest 100, sub 2^3 -> 1024); "
        "/work/shared/reference/formats.md 1.2 (the file's own visc is unverified)",
        _frozen({"fine_resolution": 256, "dt": 1e-3}),
    ),
    Preset(
        "neuralop_burgers", "burgers",
        _frozen({"nu": 0.01, "t_final": 0.96, "dt": 1e-3, "sigma": 629.2, "tau": 5.0, "alpha": 4.0,
                 "fine_resolution": 256}),
        16,
        _frozen({"n_train": 800, "n_test": 400, "n_times": 17, "time_series": "burgers_neuralop."
                 "generate_burgers_neuralop gives y (N, 17, r) on t in [0, 0.96]"}),
        "neuraloperator's bundled burgers_{train,test}_16.pt: nu = 0.01 (the file's visc), 17 snapshots on "
        "t in [0, 0.96] (read from the file by replaying it), and the initial law fitted to the file (alpha 4, tau 5, "
        "sigma 629); energy falls to 31% by t = 0.96.",
        "fitted: python -m sciattn.pde_data.burgers_neuralop burgers_train_16.pt (sciattn.pde_data.burgers_neuralop)",
        _frozen({"fine_resolution": 64}),
    ),
    Preset(
        "fno_navier_stokes", "navier_stokes",
        _frozen({"nu": 1e-5, "t_final": 20.0, "record_steps": 20, "dt": 1e-4, "alpha": 2.5, "tau": 7.0,
                 "fine_resolution": 256}),
        64,
        _frozen({"n_train": 1000, "n_test": 200, "t_in": 10, "t_out": 10, "split": "first 1000 / last 200 of 1200",
                 "forcing": "0.1 (sin(2 pi (x + y)) + cos(2 pi (x + y)))"}),
        "FNO's NavierStokes_V1e-5_N1200_T20: nu = 1e-5, w0 ~ N(0, 7^1.5 (-Delta + 49 I)^-2.5), one snapshot per "
        "time unit to T = 20, solved at 256 and stored at 64; 10 steps in -> 10 steps out.",
        "Li et al. 2020 (FNO), sec. 5.3; ns_2d.py; /work/shared/reference/formats.md 1.4 and 8.3",
        _frozen({"fine_resolution": 64, "t_final": 0.2, "record_steps": 2}),
    ),
    Preset(
        "fno_darcy", "darcy",
        _frozen({"alpha": 2.0, "tau": 3.0, "high": 12.0, "low": 3.0, "fine_resolution": 420}),
        84,
        _frozen({"n_train": 1000, "n_test": 200, "fno_grid": "421 nodes per axis, subsampled by 5 to 85",
                 "stored": "sciattn's convention keeps nodes i/84, i = 0..83: FNO's 85 without the last "
                           "(right/top Dirichlet) row and column", "forcing": 1.0}),
        "FNO's piececonst_r421 Darcy: a = 12 where a GRF N(0, (-Delta + 9 I)^-2) >= 0 else 3, f = 1, u = 0 on the "
        "boundary, solved on 421 x 421 nodes and subsampled by 5 (85 nodes; 84 stored here). These are sciattn's "
        "darcy defaults, solved at 420.",
        "Li et al. 2020 (FNO), sec. 5.2; Transolver/NSL protocol 1000 / 200 (FNO's own: 1000 / 100); "
        "/work/shared/reference/formats.md 1.3",
        _frozen({"fine_resolution": 84}),
    ),
    Preset(
        "bonev_shallow_water", "shallow_water",
        _frozen({"grid": "legendre-gauss", "dt": 150.0, "n_steps_between": 24, "mach": 0.03, "decay": 0.0,
                 "hamp": 120.0, "havg": 1.0e4, "hyperdiffusion_time": 7200.0, "hyperdiffusion_order": 4.0}),
        128,
        _frozen({"nlon": 256, "n_train": 256, "n_test": 8, "step_seconds": 3600.0,
                 "note": "torch-harmonics draws a new initial condition per sample; dt = 3600 s at the paper-era "
                         "commit, 1800 s (n_steps_between 12) since ed2e6fa"}),
        "Bonev et al. 2023 (SFNO) / torch-harmonics' shallow-water example: Legendre-Gauss 128 x 256, solver step "
        "150 s, one-hour pairs, white random spectrum, flow speeds of torch-harmonics' mach = 0.2 recipe "
        "(max 8-9 m/s, i.e. mach 0.03 in sciattn's scaling), hamp 120 m.",
        "/work/shared/reference/spherical.md 5.1-5.3 (torch-harmonics 0.9.3 examples/shallow_water_equations); "
        "the speed equivalence measured in sciattn.pde_data.shallow_water's docstring",
        _frozen({}),
    ),
]}


def get_preset(name: str) -> Preset:
    """The :class:`Preset` called ``name``; a clear error listing the presets otherwise."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"name: expected a preset, one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]


def generator_call(name: str, overrides: Mapping[str, object] | None = None) -> tuple[str, dict, dict]:
    """``(generator, params, attrs)`` of preset ``name`` with ``overrides`` applied: what
    :func:`sciattn.pde_data.generate.generate_at_resolutions` runs and records for it."""
    p = get_preset(name)
    params = {**p.params, **dict(overrides or {})}
    return p.generator, params, {"preset": p.name, "preset_source": p.source}


def _xy(generator: str, n: int, r: int, seed: int, params: dict) -> tuple[np.ndarray, np.ndarray]:
    if generator == "darcy":
        from .darcy import generate_darcy

        return generate_darcy(n, [r], seed=seed, **params)[r]
    if generator == "burgers":
        from .burgers import generate_burgers

        return generate_burgers(n, [r], seed=seed, **params)[r]
    if generator == "navier_stokes":
        from .navier_stokes import generate_navier_stokes

        return generate_navier_stokes(n, [r], seed=seed, **params)[r]
    from .shallow_water_data import generate_shallow_water

    d = generate_shallow_water(n, r, 2 * r, seed=seed, n_traj=0, **params)
    return d["x"], d["y"]


def load_preset(name: str, n_samples: int, *, resolution: int | None = None, seed: int = 0, small: bool = False,
                **overrides: object) -> dict[str, object]:
    """Generate ``n_samples`` of preset ``name`` in memory.

    Args:
        resolution: stored points per axis (``nlat`` on the sphere); default the protocol's.
        small: apply the preset's quick-build overrides (a coarser solve grid or a shorter horizon, for tests
            and smoke runs; recorded in ``params``) before ``overrides``.
        overrides: generator keywords replacing the preset's.

    Returns:
        ``{"x", "y", "preset", "generator", "params"}``: ``x``/``y`` as the generator returns them (burgers
        ``(N, r)`` each; darcy ``(N, r, r)`` each; navier_stokes ``(N, r, r)`` and ``(N, r, r, T)``;
        shallow_water ``(N, 3, r, 2r)`` each), float32.
    """
    p = get_preset(name)
    n_samples = check_positive_int("n_samples", n_samples)
    r = p.resolution if resolution is None else check_positive_int("resolution", resolution)
    generator, params, _ = generator_call(name, {**(p.small if small else {}), **overrides})
    x, y = _xy(generator, n_samples, r, seed, params)
    return {"x": x, "y": y, "preset": name, "generator": generator, "params": params}


def describe_presets() -> list[dict[str, object]]:
    """One row per preset (name, generator, params, resolution, protocol, description, source), sorted by name."""
    return [{"name": p.name, "generator": p.generator, "params": dict(p.params), "resolution": p.resolution,
             "protocol": dict(p.protocol), "description": p.description, "source": p.source}
            for p in (PRESETS[k] for k in sorted(PRESETS))]
