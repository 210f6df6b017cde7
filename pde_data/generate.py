"""``sciattn data generate``: run a built-in solver and write NetCDF files that ``load`` reads back.

Several resolutions come from one solve on a grid that all of them divide (or finer), restricted, so every
file holds the same samples. ``darcy_neuralop`` is the generator matched to neuraloperator's Darcy files
(:mod:`.darcy_neuralop`); ``sciattn data generate NAME --like RUN_OR_FILE`` takes the generator and its
parameters from a run's recorded data source or from a data file.

Files hold one variable per physical field with dims ``(sample, x, y)`` (plus ``time`` where the
field evolves), the node coordinates, and every solver parameter as an attribute; the
``sciattn_inputs`` / ``sciattn_outputs`` attributes name the input and output variables.

The other built-in generators write the samples that training and ``evaluate --resolutions`` draw
(:func:`.generated_pairs.sample_at_resolutions`, the path of training and ``evaluate --resolutions``: the
same seed gives the same values):

- ``shallow_water``: dims ``(sample, lat, lon)`` on the ``nlat x 2 nlat`` nodes of the named grid (``lat`` the
  colatitudes, ``lon`` the longitudes), one solve at ``solve_resolution`` (default the coarsest ``nlat``)
  transferred spectrally to every other ``nlat``; inputs ``geopotential, vorticity, divergence`` at ``t``,
  outputs ``*_next`` at ``t + dt``; attributes ``domain = "sphere"``, ``grid``, ``nlat``, ``nlon``, ``lmax``.
- ``coupled_navier_stokes``: inputs ``u, v, w`` (+ ``theta``) at ``t_start``, outputs ``*_next`` one
  ``delta_t`` later, dims ``(sample, x, y)``.
- ``darcy_irregular`` / ``navier_stokes_irregular``: the resolution is the number of points per sample;
  dims ``(sample, point)``, ``pos (sample, point, coord)`` and quadrature ``weights (sample, point)``,
  attribute ``sciattn_layout = "points"``.

``sciattn_channels_x`` / ``sciattn_channels_y`` record the channel names the run's data carries.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from sciattn._checks import check_positive_int

from .catalogue import catalogue_view
from .readers.xarray_data import write_xarray

__all__ = ["GENERATORS", "generate_at_resolutions", "generate_to_netcdf"]


#: ``(per resolution variables, inputs, outputs, attrs[, per resolution {"coords", "attrs"}])``
Generated = tuple


def _darcy(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .solvers.darcy import DARCY_DEFAULTS, generate_darcy

    data = generate_darcy(n, resolutions, seed=seed, progress=progress, **params)
    dims = ("sample", "x", "y")
    return ({r: {"coefficient": (dims, coeff), "pressure": (dims, u)} for r, (coeff, u) in data.items()},
            ["coefficient"], ["pressure"], {"pde": "darcy", **DARCY_DEFAULTS, **params})


def _darcy_neuralop(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .solvers.darcy_neuralop import NEURALOP_DARCY_FIT, generate_darcy_neuralop

    data = generate_darcy_neuralop(n, resolutions, seed=seed, progress=progress, **params)
    dims = ("sample", "x", "y")
    return ({r: {"mask": (dims, m), "pressure": (dims, y)} for r, (m, y) in data.items()}, ["mask"], ["pressure"],
            {"pde": "darcy", "matched_to": "neuraloperator darcy_*_16.pt", **NEURALOP_DARCY_FIT, **params})


def _burgers(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .solvers.burgers import BURGERS_DEFAULTS, generate_burgers

    data = generate_burgers(n, resolutions, seed=seed, progress=progress, **params)
    dims = ("sample", "x")
    return ({r: {"initial": (dims, a), "solution": (dims, u)} for r, (a, u) in data.items()}, ["initial"],
            ["solution"], {"pde": "burgers", **BURGERS_DEFAULTS, **params})


def _navier_stokes(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .solvers.navier_stokes import NS_DEFAULTS, generate_navier_stokes

    data = generate_navier_stokes(n, resolutions, seed=seed, progress=progress, **params)
    return ({r: {"vorticity0": (("sample", "x", "y"), w0), "vorticity": (("sample", "x", "y", "time"), u)}
             for r, (w0, u) in data.items()}, ["vorticity0"], ["vorticity"],
            {"pde": "navier_stokes", **NS_DEFAULTS, **params})


def _sampled(name: str, n: int, resolutions: list[int], seed: int, progress: bool, **params) -> dict[int, object]:
    """``{r: dataset}`` of the training/sweep path (:func:`.generated_pairs.sample_at_resolutions`), its solve
    cache in a temporary folder (nothing is left in the user's data cache)."""
    import tempfile

    from .generated_pairs import sample_at_resolutions

    with tempfile.TemporaryDirectory(prefix="sciattn-generate-") as root:
        return sample_at_resolutions(name, resolutions, root=root, n_samples=n, seed=seed, progress=progress,
                                     points=name.endswith("_irregular"), **params)


def _next(names: list[str]) -> list[str]:
    return [f"{v}_next" for v in names]


def _shallow_water(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    from .solvers.sht import SphericalHarmonicTransform

    params = {k: v for k, v in params.items() if k not in ("n_traj", "traj_len")}  # trajectories are not written
    sets = _sampled("shallow_water", n, resolutions, seed, progress, n_traj=0, **params)
    meta = next(iter(sets.values())).meta
    names = list(meta["variables"]["x"])
    dims = ("sample", "lat", "lon")
    per_res, extra = {}, {}
    for r, ds in sets.items():
        x, y = ds.x.numpy(), ds.y.numpy()
        per_res[r] = {**{v: (dims, x[:, c]) for c, v in enumerate(names)},
                      **{v: (dims, y[:, c]) for c, v in enumerate(_next(names))}}
        sht = SphericalHarmonicTransform(r, 2 * r, meta["grid"])
        extra[r] = {"coords": {"lat": sht.colatitudes.numpy(), "lon": sht.sphere.longitudes().numpy()},
                    "attrs": {"domain": "sphere", "nlat": r, "nlon": 2 * r}}
    solve = {k: meta[k] for k in ("grid", "solve_resolution", "lmax", "dt")}
    attrs = {"pde": "shallow_water", **params, **solve, "sciattn_channels_x": ",".join(names),
             "sciattn_channels_y": ",".join(names)}
    return per_res, names, _next(names), attrs, extra


def _coupled_navier_stokes(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
    sets = _sampled("coupled_navier_stokes", n, resolutions, seed, progress, **params)
    meta = next(iter(sets.values())).meta
    names = list(meta["variables"]["x"])
    dims = ("sample", "x", "y")
    per_res = {r: {**{v: (dims, ds.x[:, c].numpy()) for c, v in enumerate(names)},
                   **{v: (dims, ds.y[:, c].numpy()) for c, v in enumerate(_next(names))}} for r, ds in sets.items()}
    attrs = {"pde": "coupled_navier_stokes", "system": meta["system"], "dt": meta["dt"], **params,
             "fine_resolution": meta["fine_resolution"], "sciattn_channels_x": ",".join(names),
             "sciattn_channels_y": ",".join(names)}
    return per_res, names, _next(names), attrs


def _stack_np(tensors) -> np.ndarray:
    return np.stack([t.numpy() for t in tensors])


def _points(name: str):
    def write(n: int, resolutions: list[int], seed: int, progress: bool, **params) -> Generated:
        sets = _sampled(name, n, resolutions, seed, progress, **params)
        meta = next(iter(sets.values())).meta
        xs, ys = list(meta["variables"]["x"]), list(meta["variables"]["y"])
        per_res, extra = {}, {}
        for r, ds in sets.items():
            s = [ds[i] for i in range(len(ds))]
            x, y = (_stack_np([v[k] for v in s]) for k in ("x", "y"))
            per_res[r] = {"x": (("sample", "point", "channel_x"), x), "y": (("sample", "point", "channel_y"), y),
                          "pos": (("sample", "point", "coord"), _stack_np([v["pos"] for v in s])),
                          "weights": (("sample", "point"), _stack_np([v["weights"] for v in s]))}
            extra[r] = {"coords": {}, "attrs": {"n_points": r}}
        keep = ("fine_resolution", "layout", "jitter", "weights", "fixed_points", "include_coords", "interpolation",
                "inputs", "outputs")
        attrs = {"pde": name.removesuffix("_irregular"), **params, **{k: meta[k] for k in keep if k in meta},
                 "domain": meta.get("domain", ""), "sciattn_layout": "points",
                 "sciattn_channels_x": ",".join(xs), "sciattn_channels_y": ",".join(ys)}
        attrs["quadrature"] = attrs.pop("weights", "")
        return per_res, ["x"], ["y"], attrs, extra

    return write


# the writers the catalogue's records name (their ``writer``)
write_darcy, write_darcy_neuralop, write_burgers, write_navier_stokes = _darcy, _darcy_neuralop, _burgers, _navier_stokes
write_shallow_water, write_coupled_navier_stokes = _shallow_water, _coupled_navier_stokes
write_darcy_irregular, write_navier_stokes_irregular = _points("darcy_irregular"), _points("navier_stokes_irregular")

#: ``{name: writer}`` of every catalogue record with a writer (a live view)
GENERATORS: Mapping[str, Callable[..., Generated]] = catalogue_view(lambda r: r.writer is not None, lambda r: r.writer())


def generate_at_resolutions(name: str, n: int, resolutions: list[int], out: str | os.PathLike, *, seed: int = 0,
                            progress: bool = True, **params) -> list[Path]:
    """Generate ``n`` samples of ``name`` once (solved on a grid that every resolution divides, or finer) and
    write them restricted to each resolution as ``out/<name>_<r>.nc``: the same samples in every file
    (``r``: nlat for ``shallow_water``, points per sample for the ``*_irregular`` point sets).

    ``params`` override the solver's defaults (e.g. ``nu``, ``t_final``, ``dt`` for Navier-Stokes). ``name`` may
    also be a preset of :mod:`.presets` (e.g. ``fno_darcy``): its generator runs with the preset's parameters,
    ``params`` override them, and the files are ``out/<preset>_<r>.nc`` with a ``preset`` attribute.
    """
    from .presets import PRESETS, generator_call

    generator, preset_attrs = name, {}
    if name in PRESETS and name not in GENERATORS:
        generator, params, preset_attrs = generator_call(name, params)
    if generator not in GENERATORS:
        raise ValueError(f"name: expected a generator, one of {sorted(GENERATORS)}, or a preset, one of "
                         f"{sorted(PRESETS)}, got {name!r}")
    check_positive_int("n", n)
    if isinstance(resolutions, int) or not resolutions:
        raise ValueError(f"resolutions: expected a non-empty list of points per axis, got {resolutions!r}")
    res = sorted({check_positive_int("resolution", r) for r in resolutions})
    per_res, inputs, outputs, attrs, *more = GENERATORS[generator](n, res, seed, progress, **params)
    attrs = {**attrs, **preset_attrs}
    paths = []
    for r in res:
        variables = per_res[r]
        node = np.arange(r) / r
        spatial = {d for dims, _ in variables.values() for d in dims} & {"x", "y"}
        at = more[0][r] if more else {"coords": {d: node for d in sorted(spatial)}, "attrs": {}}
        paths.append(write_xarray(Path(out) / f"{name}_{r}.nc", variables, inputs=inputs, outputs=outputs,
                                  coords=at["coords"],
                                  attrs={**attrs, "seed": seed, "n_samples": n, "resolution": r,
                                         "resolutions": res, **at["attrs"]}))
    return paths


def generate_to_netcdf(name: str, n: int, resolution: int, out: str | os.PathLike, *, seed: int = 0,
                       progress: bool = True, **params) -> Path:
    """Generate ``n`` samples of ``name`` at ``resolution`` and write ``out/<name>_<resolution>.nc``.

    ``params`` override the solver's defaults (e.g. ``nu``, ``t_final``, ``dt`` for Navier-Stokes).
    """
    check_positive_int("resolution", resolution)
    return generate_at_resolutions(name, n, [resolution], out, seed=seed, progress=progress, **params)[0]
