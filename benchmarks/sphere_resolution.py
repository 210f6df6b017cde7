"""The sphere operators across resolutions: convergence at initialisation, per-grid setup cost, and the
zero-shot resolution sweep of a trained spherical transformer, through the public API and the CLI.

Three parts, one row each per case (field ``part``):

1. ``convergence`` (the protocol of ``tests/operators/test_sphere_convergence.py``, which imports it from here:
   :func:`sphere_operators`, :func:`grid_setup`, :func:`smooth`): each sphere operator at its defaults, seed 0,
   float64, built once, with each ``attentions`` choice; a smooth input (low-degree spherical harmonics) on four
   nested grids; relative L2 of each coarser output against the finest at shared nodes (area-weighted on the
   sphere, plain over pixel centres for the planar baseline).
2. ``setup``: the first call of a model built at 33x64 on another grid builds that grid's geometry
   (neighbourhoods, quadrature, interpolation); the second call reuses it. Both timed (B = 1, 3 channels,
   default width), on the grids ``setup_grids`` (``nlat``; ``nlon = 2 (nlat - 1)``).
3. ``sweep`` (when ``sweep`` is true): ``sciattn train examples/configs/shallow_water_spherical.toml`` (16 x 32,
   with the ``train_set`` overrides), then ``sciattn evaluate RUN --resolutions ...``: the same band-limited
   shallow-water samples on every grid; the run folder is temporary.

    python -m benchmarks run sphere_resolution [--quick] [--set sweep=false] [--set setup_grids='[17, 65]']
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from .harness import ROOT, module_benchmarks

CONFIG = ROOT / "examples" / "configs" / "shallow_water_spherical.toml"
SWEEP = (8, 16, 32, 64)
ATTENTIONS = ("neighborhood", "global")


# ---- the convergence protocol (shared with tests/operators/test_sphere_convergence.py) ---------------------------


def sphere_operators() -> list[str]:
    """The registered operators with ``operator_kind(name) == "sphere"``, in registry order."""
    from sciattn.operators import list_operators
    from sciattn.operators.registry import operator_kind

    return [name for name in list_operators() if operator_kind(name) == "sphere"]


def smooth(theta, lam):
    """Two channels of low-degree real spherical harmonics at colatitudes ``theta`` and longitudes ``lam``
    (arrays of one shape): ``(1, 2, nlat, nlon)`` float64."""
    import numpy as np
    import torch
    from scipy import special

    def y(degree, order):
        return special.sph_harm_y(degree, abs(order), theta, lam)

    f = y(1, 0).real + 0.8 * y(2, 1).real + 0.6 * y(3, 2).imag + 0.4 * y(2, 0).real
    return torch.as_tensor(np.stack([f, np.cos(theta) * np.sin(lam)]), dtype=torch.float64)[None]


def grid_setup(name: str):
    """``(construction grid, run grids, input at n, output at the shared nodes of n, error weights at n)`` of the
    sphere operator ``name``: nested equiangular grids with area weights for an operator with a latitude rule
    (a ``grid`` argument), nested pixel-centre images with unit weights otherwise."""
    import numpy as np
    import torch

    from sciattn.domain import SphereGrid
    from sciattn.operators.registry import operator_parameters

    if "grid" in operator_parameters(name):  # a latitude rule: nested equiangular grids, area weights
        grids = [17, 33, 65, 129]

        def sample(n):
            g = SphereGrid(n, 2 * (n - 1), "equiangular")
            return smooth(*np.meshgrid(g.colatitudes().numpy(), g.longitudes().numpy(), indexing="ij"))

        def shared(ref, n):
            s = (grids[-1] - 1) // (n - 1)
            return ref[..., ::s, ::s]

        def weights(n):
            return SphereGrid(n, 2 * (n - 1), "equiangular").quadrature_weights(torch.float64)

        return (33, 64), grids, sample, shared, weights
    grids = [8, 24, 72, 216]  # pixel centres (i + 1/2)/n, nested under refinement by 3

    def sample(n):
        y, x = (np.arange(n) + 0.5) / n, (np.arange(2 * n) + 0.5) / (2 * n)
        return smooth(*np.meshgrid(np.pi * y, 2 * np.pi * x, indexing="ij"))

    def shared(ref, n):
        s = grids[-1] // n
        return ref[..., s // 2::s, s // 2::s]

    return (16, 32), grids, sample, shared, lambda n: torch.ones(n, 2 * n, dtype=torch.float64)


def relative_errors(name: str, attention: str | None = None) -> tuple[dict[str, float], list[int], list[int]]:
    """``({str(n): e_n}, construction grid, run grids)`` of operator ``name`` at its defaults (``attention``
    given when not ``None``), seed 0, float64: the relative L2 of each coarser output against the finest at the
    shared nodes."""
    import torch

    from sciattn.operators import create_operator

    build, grids, sample, shared, weights = grid_setup(name)
    torch.manual_seed(0)
    extra = {} if attention is None else {"attention": attention}
    model = create_operator(name, in_channels=2, out_channels=1, nlat=build[0], nlon=build[1],
                            **extra).double().eval()
    with torch.no_grad():
        outs = {n: model(sample(n)) for n in grids}
    ref = outs[grids[-1]]
    errors = {}
    for n in grids[:-1]:
        r, w = shared(ref, n), weights(n)
        errors[str(n)] = float((((outs[n] - r) ** 2 * w).sum() / (r ** 2 * w).sum()).sqrt())
    return errors, list(build), grids


# ---- the three parts -----------------------------------------------------------------------------------------------

SCHEMA = {
    "part": "str",
    # convergence
    "operator": "str?", "attention": "str?", "default": "bool?", "built_at": "list?", "grids": "list?",
    "rel_l2_vs_finest": "dict?",
    # setup
    "grid": "list?", "first_call_ms": "float?", "cached_call_ms": "float?",
    # sweep: one row per resolution, with the run-level values of the sweep
    "resolution": "int?", "regime": "str?", "in_distribution": "bool?", "rel_l2": "float?", "rel_h1": "float?",
    "ratio_to_training": "float?", "ms_per_sample": "float?", "train_seconds": "float?", "sweep_seconds": "float?",
    "n_samples": "int?", "verdict": "str?", "data_built": "dict?",
}
PARAMS = {"operators": None, "attentions": list(ATTENTIONS), "setup_grids": [17, 65, 129, 257], "sweep": True,
          "resolutions": list(SWEEP), "n_samples": 32, "train_set": []}
QUICK = {"setup_grids": [17, 33], "resolutions": [8, 16, 32], "n_samples": 4,
         "train_set": ["train.epochs=1", "data.n_train=16", "data.n_test=4"]}


def _empty() -> dict:
    return dict.fromkeys(SCHEMA)


def convergence(operators: list[str] | None = None, attentions=ATTENTIONS) -> list[dict]:
    known = sphere_operators()
    rows = []
    for name in operators or known:
        if name not in known:
            raise ValueError(f"operators: expected names of sphere operators {known}, got {name!r}")
        for attention in attentions:
            errors, build, grids = relative_errors(name, attention)
            rows.append({**_empty(), "part": "convergence", "operator": name, "attention": attention,
                         "default": attention == "neighborhood", "built_at": build, "grids": grids,
                         "rel_l2_vs_finest": errors})
            print(f"{name} {attention}: {errors}", flush=True)
    return rows


def setup_cost(grids: list[int]) -> list[dict]:
    import torch

    from sciattn.operators import create_operator

    torch.manual_seed(0)
    model = create_operator("spherical_transformer", in_channels=3, out_channels=3, nlat=33, nlon=64).eval()
    rows = []
    with torch.no_grad():
        model(torch.randn(1, 3, 33, 64))
        for n in grids:
            x = torch.randn(1, 3, n, 2 * (n - 1))
            t0 = time.perf_counter()
            model(x)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            model(x)
            rows.append({**_empty(), "part": "setup", "grid": [n, 2 * (n - 1)], "first_call_ms": 1e3 * first,
                         "cached_call_ms": 1e3 * (time.perf_counter() - t0)})
    return rows


def sweep(resolutions: list[int], n_samples: int, train_set: list[str]) -> list[dict]:
    from sciattn.train.cli import main as cli

    keep = ("resolution", "regime", "in_distribution", "rel_l2", "rel_h1", "ratio_to_training", "ms_per_sample")
    with tempfile.TemporaryDirectory(prefix="sphere_resolution_") as tmp:
        out = Path(tmp) / "run"
        sets = [f'data.root="{Path(tmp) / "data"}"', *train_set]
        t0 = time.perf_counter()
        if cli(["train", str(CONFIG), "--out", str(out), "--no-progress",
                *[a for s in sets for a in ("--set", s)]]) != 0:
            raise RuntimeError("sphere_resolution sweep: sciattn train failed")
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if cli(["evaluate", str(out), "--resolutions", *map(str, resolutions), "--n-samples", str(n_samples),
                "--root", str(Path(tmp) / "data"), "--no-progress"]) != 0:
            raise RuntimeError("sphere_resolution sweep: sciattn evaluate failed")
        sweep_s = time.perf_counter() - t0
        report = json.loads((out / "eval" / "shallow_water.json").read_text())
        shutil.rmtree(out, ignore_errors=True)
    return [{**_empty(), "part": "sweep", **{k: row[k] for k in keep}, "train_seconds": train_s,
             "sweep_seconds": sweep_s, "n_samples": n_samples, "verdict": report["verdict"],
             "data_built": report["data_built"]} for row in report["rows"]]


def _ints(params: dict, key: str, least: int) -> list[int]:
    v = params[key]
    if not isinstance(v, list) or not v or not all(isinstance(n, int) and n >= least for n in v):
        raise ValueError(f"{key}: expected a non-empty list of integers >= {least}, got {v!r}")
    return v


def run(params: dict) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    attentions = params["attentions"]
    if not isinstance(attentions, list) or not set(attentions) <= set(ATTENTIONS):
        raise ValueError(f"attentions: expected a list of {list(ATTENTIONS)}, got {attentions!r}")
    operators = params["operators"]
    if operators is not None and not (isinstance(operators, list) and all(isinstance(o, str) for o in operators)):
        raise ValueError(f"operators: expected null (every sphere operator) or a list of names, got {operators!r}")
    setup_grids = _ints(params, "setup_grids", 3)
    if not isinstance(params["sweep"], bool):
        raise ValueError(f"sweep: expected true or false, got {params['sweep']!r}")
    rows = convergence(operators, attentions) + setup_cost(setup_grids)
    if params["sweep"]:
        n = params["n_samples"]
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n_samples: expected a positive integer, got {n!r}")
        if not isinstance(params["train_set"], list) or not all(isinstance(s, str) for s in params["train_set"]):
            raise ValueError(f"train_set: expected a list of 'key=value' strings, got {params['train_set']!r}")
        rows += sweep(_ints(params, "resolutions", 2), n, params["train_set"])
    return rows


def _pct(v: float) -> str:
    return f"{v:.2%}"


def table(records: list[dict]) -> str:
    """The three parts as three tables (convergence, setup, sweep)."""
    rows = [r["row"] for r in records]
    lines = ["At initialisation (defaults, seed 0), relative L2 against the finest grid at shared nodes:", "",
             "| operator | attention | built at | grids | error (coarse, mid, second-finest) | ratios |",
             "|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["part"] == "convergence"):
        e = list(r["rel_l2_vs_finest"].values())
        ratios = ", ".join(f"{e[i + 1] / e[i]:.2f}" for i in range(len(e) - 1))
        lines.append(f"| {r['operator']} | {r['attention']}{' (default)' if r['default'] else ''} | "
                     f"{'x'.join(map(str, r['built_at']))} | {' / '.join(map(str, r['grids']))} | "
                     f"{' / '.join(map(_pct, e))} | {ratios} |")
    lines += ["", "Per-grid setup of a spherical_transformer built at 33x64 (default width), B = 1:", "",
              "| grid | first call (ms, builds the geometry) | cached call (ms) |", "|---|---|---|"]
    lines += [f"| {'x'.join(map(str, r['grid']))} | {r['first_call_ms']:.0f} | {r['cached_call_ms']:.0f} |"
              for r in rows if r["part"] == "setup"]
    sw = [r for r in rows if r["part"] == "sweep"]
    if sw:
        s, built = sw[0], sw[0]["data_built"]
        train = next((r["resolution"] for r in sw if r["regime"] == "training"), None)
        lines += ["", f"Zero-shot sweep of `{CONFIG.relative_to(ROOT)}` trained at nlat = {train} ({train} x "
                  f"{2 * train if train else '—'}; train {s['train_seconds']:.0f} s), {s['n_samples']} fresh samples "
                  f"(seed {built['seed']}), solved once at nlat = {built['solve_resolution']} and transferred "
                  "spectrally:", "",
                  "| nlat (grid nlat x 2 nlat) | regime | in distribution | relative L2 | relative H1 | "
                  f"L2 / L2 at {train} |", "|---|---|---|---|---|---|"]
        for r in sw:
            ratio = "—" if r["ratio_to_training"] is None else f"{r['ratio_to_training']:.2f}"
            lines.append(f"| {r['resolution']} | {r['regime']} | {'yes' if r['in_distribution'] else 'NO'} | "
                         f"{r['rel_l2']:.4f} | {r['rel_h1']:.4f} | {ratio} |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    conv = [r for r in rows if r["part"] == "convergence"]
    ok = []
    for r in conv:
        e = list(r["rel_l2_vs_finest"].values())
        ok.append(all(e[i + 1] <= 0.6 * e[i] for i in range(len(e) - 1)) and e[-1] <= 0.05)
    out = (f"Convergence contract (`tests/operators/test_sphere_convergence.py`: each refinement at least first order, "
           f"e ≤ 0.6 e_previous, and at most 5% at the second-finest grid): {sum(ok)} of {len(conv)} cases meet it.")
    sw = [r for r in rows if r["part"] == "sweep"]
    if sw:
        out += f"\n\nVerdict: {sw[0]['verdict']}"
    else:
        out += "\n\nNo sweep in this run (`sweep=false`)."
    return out


BENCHMARKS = module_benchmarks(globals(),
    description="The sphere operators across resolutions: convergence at initialisation, per-grid setup cost, "
                "and the zero-shot resolution sweep of a trained spherical transformer;",
    claim="both sphere operators converge under refinement at their defaults, and the trained spherical "
          "transformer keeps its error zero-shot from 8 x 16 to 64 x 128 (docs/fidelity.md)",
)
