"""Named presets: the papers' data protocols as parameters of the built-in generators.

A preset names a generator of :mod:`sciattn.pde_data.generate` (``darcy``, ``burgers``, ``navier_stokes``,
``shallow_water``), the generator keywords of a published protocol, the protocol's stored resolution and sizes,
and where the values come from. The generators' own defaults are not always the protocol (see the table in
``docs/data.md``); a preset is. Each preset is held by its generator's catalogue record
(:mod:`sciattn.pde_data.generators`); :data:`PRESETS` reads them from there.

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


def frozen(d: dict) -> Mapping[str, object]:
    return MappingProxyType(dict(d))


class _Presets(Mapping):
    """``{name: Preset}`` of every catalogue record's ``presets`` (a live view)."""

    def _all(self) -> dict[str, Preset]:
        from . import catalogue

        return {p.name: p for r in catalogue.records() for p in r.presets}

    def __getitem__(self, name: str) -> Preset:
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: the presets, read from the generators' records (:mod:`.generators`)
PRESETS: Mapping[str, Preset] = _Presets()


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
        from .solvers.darcy import generate_darcy

        return generate_darcy(n, [r], seed=seed, **params)[r]
    if generator == "burgers":
        from .solvers.burgers import generate_burgers

        return generate_burgers(n, [r], seed=seed, **params)[r]
    if generator == "navier_stokes":
        from .solvers.navier_stokes import generate_navier_stokes

        return generate_navier_stokes(n, [r], seed=seed, **params)[r]
    from .solvers.shallow_water.data import generate_shallow_water

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
