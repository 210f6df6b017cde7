"""Registry convergence: every grid operator at its default configuration under grid refinement.

The measurement behind ``tests/operators/test_discretisation_convergence.py`` (the test imports it from here, so
the test and the table share one implementation). For each operator registered with ``input_kind="grid"``, at
initialisation (``torch.manual_seed(0)``), in eval mode, float32, batch 1, the constructor filled only with its
required arguments (:data:`REQUIRED`):

* a smooth input ``u(x) = Σ_c sin/cos products`` sampled at the cell centres of ``n`` cells per axis;
* the reference output on ``reference`` cells per axis, restricted onto the coarse grid by cell means
  (:func:`restrict`), and ``e_n = ||y_n - R_n y_ref|| / ||R_n y_ref||`` (Frobenius over channels and cells);
* the contract: ``e_128 <= 0.6 e_64`` (at least first order) and ``e_128 <= 5%`` (in general: the finest size
  against the one before it).

    python -m benchmarks run convergence [--quick] [--set operators='["fno"]'] [--set dims='[1]']
"""

from __future__ import annotations

import inspect
import math

from .harness import module_benchmarks

# Required constructor arguments, filled by convention (one scalar field in, one out).
REQUIRED = {"in_channels": 1, "out_channels": 1, "variables": ["u"]}
SIZES = (32, 64, 128)
REFERENCE = 256
# 3-D: the same contract two refinements lower (8³, 16³, 32³ against 64³); 128³ at the defaults is not affordable on
# one CPU thread. First order is asserted; the 5% bound at 32³ is reported, not asserted (32³ is the 3-D analogue
# of 32², where no operator is asked to be within 5% either).
SIZES_3D = (8, 16, 32)
REFERENCE_3D = 64
# Not run in 3-D: the multipole operators' default finest key grid is 64³ cells, whatever the input, so one forward at
# the 64³ reference costs minutes per layer on one CPU thread (a mano_extended run was stopped after 7 minutes).
NOT_IN_3D = {"mano": "finest key grid 64³ at the defaults: minutes per forward on one CPU thread",
             "mano_extended": "finest key grid 64³ at the defaults: minutes per forward on one CPU thread"}
FIRST_ORDER = 0.6  # e_finest <= 0.6 e_previous
TOLERANCE = 0.05  # e_finest <= 5%


class MissingConvention(KeyError):
    """An operator has a required constructor argument with no entry in :data:`REQUIRED`."""


def grid_operators() -> list[str]:
    """The registered operators that take grids, in registry order."""
    from sciattn.operators import list_operators
    from sciattn.operators.registry import operator_kind

    return [n for n in list_operators() if operator_kind(n) == "grid"]


def takes(name: str, spatial_dims: int) -> bool:
    """Whether operator ``name`` can be built for ``spatial_dims`` (2-D always; otherwise via ``spatial_dims``)."""
    from sciattn.operators.registry import operator_parameters

    return spatial_dims == 2 or "spatial_dims" in operator_parameters(name)


def config(name: str, spatial_dims: int) -> dict:
    """The constructor arguments of ``name``: its required ones from :data:`REQUIRED`, plus ``spatial_dims``."""
    from sciattn.operators.registry import operator_parameters

    params = operator_parameters(name)
    required = [k for k, p in params.items() if p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    unknown = [k for k in required if k not in REQUIRED]
    if unknown:
        raise MissingConvention(f"operator {name!r}: required constructor argument(s) {unknown} have no entry in "
                                f"REQUIRED of {__name__}; add a convention value there (known: {sorted(REQUIRED)})")
    out = {k: REQUIRED[k] for k in required}
    if spatial_dims != 2:
        out["spatial_dims"] = spatial_dims
    return out


def smooth(n: int, d: int):
    """The smooth input at the cell centres of ``n`` cells per axis in ``d`` dimensions, ``(1, 1, n, ..., n)``."""
    import torch

    t = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    axes = torch.meshgrid(*([t] * d), indexing="ij")
    u = sum(math.sin(1.0 + a) * torch.sin(2 * math.pi * (a + 1) * x + a) for a, x in enumerate(axes))
    u = u + math.prod(torch.cos(2 * math.pi * x) for x in axes)
    return u[None, None].float()


def restrict(y, n: int):
    """Cell means of ``y (B, C, *N)`` on the grid of ``n`` cells per axis (``N`` a multiple of ``n``)."""
    d = y.dim() - 2
    r = y.shape[-1] // n
    split = [s for _ in range(d) for s in (n, r)]
    return y.reshape(*y.shape[:2], *split).mean(tuple(3 + 2 * a for a in range(d)))


def relative_errors(name: str, spatial_dims: int = 2, sizes=SIZES, reference: int = REFERENCE) -> dict[int, float]:
    """``{n: e_n}`` of the operator ``name`` at its defaults (module docstring)."""
    import torch

    from sciattn.operators import create_operator

    torch.manual_seed(0)
    model = create_operator(name, **config(name, spatial_dims)).float().eval()
    with torch.no_grad():
        ref = model(smooth(reference, spatial_dims))
        errs = {}
        for n in sizes:
            coarse = restrict(ref, n)
            errs[n] = float((model(smooth(n, spatial_dims)) - coarse).norm() / coarse.norm())
    return errs


# ---- the harness entry (benchmarks/registry.py) ------------------------------------------------------------------

SCHEMA = {"operator": "str", "dims": "int", "sizes": "list", "reference": "int", "e8": "float?", "e16": "float?",
          "e32": "float?", "e64": "float?", "e128": "float?", "ratio": "float", "verdict": "str"}
PARAMS = {"operators": None, "dims": [2, 1, 3], "sizes": list(SIZES), "reference": REFERENCE,
          "sizes_3d": list(SIZES_3D), "reference_3d": REFERENCE_3D}
QUICK = {"dims": [1], "sizes": [32, 64], "reference": 128}
COLUMNS = ("operator", "dims", "e8", "e16", "e32", "e64", "e128", "ratio", "verdict")
LABELS = {"dims": "dims", "ratio": "ratio (finest / previous)"}


def run(params: dict) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    sizes = [int(n) for n in params["sizes"]]
    reference = int(params["reference"])
    names = params["operators"] or grid_operators()
    rows = []
    sizes_2d, reference_2d = sizes, reference
    for name in names:
        for d in params["dims"]:
            if not takes(name, int(d)) or (int(d) == 3 and name in NOT_IN_3D):
                continue
            three = int(d) == 3
            sizes = [int(n) for n in params.get("sizes_3d", SIZES_3D)] if three else sizes_2d
            reference = int(params.get("reference_3d", REFERENCE_3D)) if three else reference_2d
            errs = relative_errors(name, int(d), sizes, reference)
            fine, prev = errs[sizes[-1]], errs[sizes[-2]]
            ratio = fine / prev
            ok = fine <= FIRST_ORDER * prev and (three or fine <= TOLERANCE)
            verdict = "meets" if ok else (f"fails ({'ratio > ' + str(FIRST_ORDER) if ratio > FIRST_ORDER else ''}"
                                          f"{', ' if ratio > FIRST_ORDER and fine > TOLERANCE else ''}"
                                          f"{'e > ' + format(TOLERANCE, '.0%') if fine > TOLERANCE else ''})")
            rows.append({"operator": name, "dims": int(d), "sizes": sizes, "reference": reference,
                         **{f"e{n}": errs.get(n) for n in (8, 16, 32, 64, 128)}, "ratio": ratio, "verdict": verdict})
            print(f"{name} {d}-D: {', '.join(f'e{n}={e:.4g}' for n, e in errs.items())}, ratio {ratio:.3f}, {verdict}",
                  flush=True)
    return rows


def notes(records: list[dict]) -> str:
    r = records[0]["row"]
    sizes, ref = r["sizes"], r["reference"]
    met = sum(x["row"]["verdict"] == "meets" for x in records)
    return (f"Each grid operator of the registry at its defaults (seed 0, init, eval, float32, batch 1; required "
            f"arguments `in_channels=1, out_channels=1`), smooth input at cell centres; `e_n`: relative Frobenius "
            f"difference of the output on `n` cells per axis to the {ref}-cell output restricted by cell means. "
            f"Contract (`tests/operators/test_discretisation_convergence.py`): e{sizes[-1]} ≤ {FIRST_ORDER}·"
            f"e{sizes[-2]} and e{sizes[-1]} ≤ {TOLERANCE:.0%}; in 3-D ({'³, '.join(map(str, SIZES_3D))}³ against "
            f"{REFERENCE_3D}³) first order only, the size of e32 is reported. {met} of {len(records)} cases meet it.")


BENCHMARKS = module_benchmarks(globals(), columns=COLUMNS, labels=LABELS,
    description="Every grid operator of the registry at its defaults under grid refinement, e_n against a finer "
                "reference grid;",
    claim="every grid operator at its defaults is discretisation-convergent: e128 ≤ 0.6·e64 and ≤ 5% "
          "(docs/concepts/md)",
)
