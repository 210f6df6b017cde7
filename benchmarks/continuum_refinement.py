"""The continuum-attention operators under grid refinement: the TNO, and the ViTNO's two patch forms.

The measurement of the registry convergence contract (:func:`benchmarks.convergence.smooth` input at cell centres,
the reference output restricted by cell means, ``e_n = ||y_n - R_n y_ref|| / ||R_n y_ref||``; seed 0, init, eval,
float32, batch 1, one input and one output channel), on three configurations:

- ``continuum_transformer`` (form ``global``): the TNO at its defaults (global continuum attention);
- ``continuum_vitno physical``: the ViTNO at its defaults, ``patches=4`` per axis (patches of fixed physical size);
- ``continuum_vitno points``: the published form, ``patch_size`` points per patch side (the physical patches'
  size at ``n = 64``): the patches shrink as the grid is refined, so the number of patches grows with ``n``.

The published code cannot change resolution without ``set_im_size(new_im_size, new_patch_size)``; the paper's
zero-shot tests scale the patch with the grid (13 x 13 patches at every size), which is the physical form.

    python -m benchmarks run continuum_refinement [--quick]
"""

from __future__ import annotations

from typing import Any

from .harness import int_param, module_benchmarks

PARAMS: dict[str, Any] = {"sizes": [32, 64, 128], "reference": 256, "patch_size": 16,
                          "forms": ["continuum_transformer", "continuum_vitno physical", "continuum_vitno points"]}
QUICK: dict[str, Any] = {"sizes": [32, 64], "reference": 128, "forms": ["continuum_vitno physical",
                                                                        "continuum_vitno points"]}
SCHEMA = {"operator": "str", "form": "str", "n": "int", "patches": "int?", "patch_points": "int?", "e": "float", "ratio": "float?"}
COLUMNS = ("operator", "form", "n", "patches", "patch_points", "e", "ratio")
LABELS = {"patches": "patches per axis", "patch_points": "points per patch side", "e": "e_n",
          "ratio": "e_n / e_(n/2)"}
FORMS = ("continuum_transformer", "continuum_vitno physical", "continuum_vitno points")


def config(form: str, patch_size: int) -> tuple[str, dict]:
    """``(operator name, constructor arguments)`` of a form."""
    if form not in FORMS:
        raise ValueError(f"forms: expected entries of {list(FORMS)}, got {form!r}")
    name = form.split()[0]
    extra = dict(patches=None, patch_size=patch_size) if form.endswith("points") else {}
    return name, dict(in_channels=1, out_channels=1, **extra)


def run(params: dict) -> list[dict]:
    import torch

    from sciattn.operators import create_operator

    from .convergence import restrict, smooth

    torch.set_num_threads(1)
    sizes, ref_n, p = [int(n) for n in params["sizes"]], int_param(params, "reference"), int_param(params, "patch_size")
    if any(ref_n % n or n % p for n in sizes):
        raise ValueError(f"sizes: expected sizes that divide reference={ref_n} and are multiples of patch_size={p}, "
                         f"got {sizes}")
    rows = []
    for form in params["forms"]:
        name, cfg = config(form, p)
        torch.manual_seed(0)
        model = create_operator(name, **cfg).float().eval()
        prev = None
        with torch.no_grad():
            ref = model(smooth(ref_n, 2))
            for n in sizes:
                coarse = restrict(ref, n)
                e = float((model(smooth(n, 2)) - coarse).norm() / coarse.norm())
                patches = None if name == "continuum_transformer" else model.patch_grid((n, n))[0]
                rows.append({"operator": name, "form": {"continuum_transformer": "global"}.get(form, form.split()[-1]),
                             "n": n, "patches": patches, "patch_points": None if patches is None
                             else n // patches, "e": e, "ratio": None if prev is None else e / prev})
                print(f"{form} n={n}: e={e:.4g}", flush=True)
                prev = e
    return rows


def notes(records: list[dict]) -> str:
    p = records[0]["params"]
    return (f"Smooth input at cell centres of n cells per axis, seed 0, init, eval, float32; `e_n`: relative "
            f"Frobenius difference of the output to the {p['reference']}-cell output restricted by cell means (the "
            f"registry convergence measure). `points`: the published patch side of {p['patch_size']} grid points.")


BENCHMARKS = module_benchmarks(globals(), columns=COLUMNS, labels=LABELS,
    description="The continuum-attention operators under grid refinement: the TNO, and the ViTNO with patches of fixed "
                "physical size against the published patch side in grid points;",
    claim="the ViTNO with patches of fixed physical size converges under refinement; with the published patch side "
          "in points it does not (docs/operators/continuum_vitno.md)",
)
