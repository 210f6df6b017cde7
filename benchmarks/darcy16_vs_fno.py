"""Galerkin Transformer against neuraloperator's FNO on the real 16×16 Darcy files, side by side.

Both models train on ``darcy_train_16.pt`` of the ``data`` folder (1000 samples; ``n_train`` keeps the first
ones) for the same number of epochs and are tested on ``darcy_test_16.pt`` (50 samples), for each seed:

* GT: ``examples/configs/darcy16_galerkin.toml`` through ``sciattn.train.train_run``.
* FNO: ``neuralop.models.FNO(n_modes=(8, 8), hidden_channels=24, projection_channel_ratio=2)``
  (about 192k real parameters), trained by the same trainer with the ``recipes`` of :data:`FNO_RECIPES` — the
  GT's recipe, neuraloperator's own Darcy example recipe (AdamW lr 8e-3, batch 32, cosine schedule, H1 loss)
  and the best recipe found by a small search. The best FNO recipe is the baseline.

Zero-shot super-resolution: the upstream higher-resolution test files are deliberately not
shipped, so the benchmark writes ``n_generated`` Darcy test samples in the same format at 16, 32 and 64 with the
built-in solver (``sciattn.pde_data.darcy``; all resolutions restricted from one 128×128 solve).
The neuraloperator files' generator is not documented; their statistics match contrast
a ∈ {1, 12} with ``x = (a == 12)`` and ``y = k·u``. ``k`` is fitted from the training
file's mean against ``n_calibration`` solver samples (moment matching) and reported. The trained GT run is then
evaluated on these files through ``sciattn evaluate``.

    python -m benchmarks run darcy16_vs_fno [--quick] [--set data='"../shared/data"'] [--set seeds='[0, 1, 2]']

One row per seed, model and recipe is appended to ``benchmarks/results/darcy16_vs_fno.jsonl``; the table
(mean ± std over the seeds) in docs/benchmarks/training.md is generated from the latest run. The runs are written
under ``out`` (default: a temporary folder, removed afterwards). ``--quick`` trains one epoch on 32 samples,
one seed and one FNO recipe (a check of the path, not the claim).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from .harness import module_benchmarks

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "configs" / "darcy16_galerkin.toml"
GT = "Galerkin Transformer"
FNO_RECIPES = {
    "gt_recipe": None,  # the GT config's [train] recipe, read in run()
    "neuralop_recipe": dict(batch_size=32, lr=8e-3, weight_decay=1e-4, scheduler="cosine", loss="h1", grad_clip=None),
    # The best FNO recipe found in a small search on this data (batch 4/8/32, lr 2e-3..1e-2, H1 weight).
    "tuned_recipe": dict(batch_size=4, lr=5e-3, weight_decay=1e-4, scheduler="onecycle", loss="l2+h1",
                         h1_weight=0.5, grad_clip=1.0),
}


def train_fno(train, test, *, epochs, seed, recipe):
    """``(test rel. L2, parameters, train seconds)`` of the FNO trained with ``recipe``."""
    import torch
    from neuralop.models import FNO

    from sciattn.pde_data.normalizers import fit_normalizers
    from sciattn.train.training.run import count_parameters
    from sciattn.train.training.trainer import Trainer

    torch.manual_seed(seed)
    model = FNO(n_modes=(8, 8), hidden_channels=24, in_channels=1, out_channels=1, projection_channel_ratio=2)
    xn, yn = fit_normalizers(train)
    trainer = Trainer(model=model, train_data=train, test_data={"test_16": test}, x_normalizer=xn, y_normalizer=yn,
                      spatial_dims=2, epochs=epochs, seed=seed, progress=False, log=lambda m: None, **recipe)
    t0 = time.perf_counter()
    trainer.fit()
    seconds = time.perf_counter() - t0
    return trainer.evaluate()["test_16"]["rel_l2"], count_parameters(model), seconds


def write_generated_tests(out: Path, train_file: Path, n: int = 50, n_calibration: int = 200
                          ) -> tuple[dict[int, Path], float]:
    """Calibrated solver data at 16, 32, 64 in neuraloperator's format; returns paths and k."""
    import numpy as np
    import torch

    from sciattn.pde_data.darcy import generate_darcy
    from sciattn.pde_data.neuralop_pt import write_neuralop_pt

    y_mean = float(torch.load(train_file, weights_only=True)["y"].double().mean())
    calib = generate_darcy(n_calibration, [16], fine_resolution=128, seed=12345, low=1.0, high=12.0)
    k = y_mean / float(np.mean(calib[16][1], dtype=np.float64))
    data = generate_darcy(n, [16, 32, 64], fine_resolution=128, seed=777, low=1.0, high=12.0)
    paths = {}
    for res, (a, u) in data.items():
        paths[res] = write_neuralop_pt(out / f"darcy_test_{res}.pt", torch.from_numpy(a) > 6.5,
                                       torch.from_numpy(k * u))
    return paths, k


def _check(params: dict) -> None:
    seeds = params["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ValueError(f"seeds: expected a non-empty list of ints, got {seeds!r}")
    recipes = params["recipes"]
    if not isinstance(recipes, list) or not recipes or any(r not in FNO_RECIPES for r in recipes):
        raise ValueError(f"recipes: expected a non-empty list of {list(FNO_RECIPES)}, got {recipes!r}")
    for key in ("epochs", "n_generated", "n_calibration"):
        if not isinstance(params[key], int) or isinstance(params[key], bool) or params[key] < 1:
            raise ValueError(f"{key}: expected a positive int, got {params[key]!r}")
    n = params["n_train"]
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 2):
        raise ValueError(f"n_train: expected null (every sample) or an int >= 2, got {n!r}")


def compare(params: dict, out: Path) -> list[dict]:
    """Train and test every model for every seed; one row per seed, model and recipe."""
    from sciattn.pde_data.neuralop_pt import load_neuralop_pt
    from sciattn.train.cli import main as cli_main
    from sciattn.train.config import load_config
    from sciattn.train.training.run import train_run

    data = Path(params["data"])
    train_file, test_file = data / "darcy_train_16.pt", data / "darcy_test_16.pt"
    overrides = [f"data.train={json.dumps(str(train_file))}", f"data.test={json.dumps(str(test_file))}",
                 f"train.epochs={int(params['epochs'])}"]
    if params["n_train"] is not None:
        overrides.append(f"data.n_train={int(params['n_train'])}")
    base = load_config(CONFIG, overrides)
    train = load_neuralop_pt(train_file, n_samples=params["n_train"])
    test = load_neuralop_pt(test_file)
    gen_paths, k = write_generated_tests(out / "generated", train_file, params["n_generated"], params["n_calibration"])
    recipes = {name: FNO_RECIPES[name] for name in params["recipes"]}
    if "gt_recipe" in recipes:
        t = base.train
        recipes["gt_recipe"] = dict(batch_size=t.batch_size, lr=t.lr, weight_decay=t.weight_decay,
                                    scheduler=t.scheduler, pct_start=t.pct_start, loss=t.loss, h1_weight=t.h1_weight,
                                    grad_clip=t.grad_clip)
    config = str(CONFIG.relative_to(ROOT))
    rows = []
    for seed in params["seeds"]:
        cfg = load_config(CONFIG, overrides + [f"train.seed={seed}"])
        run_dir = out / f"gt_seed{seed}"
        t0 = time.perf_counter()
        metrics = train_run(cfg, run_dir, progress=False, log=lambda m: None)
        gt_seconds = time.perf_counter() - t0
        eval_json = run_dir / "zero_shot.json"
        if cli_main(["evaluate", str(run_dir), "--data", *[str(p) for p in gen_paths.values()],
                     "--json", str(eval_json)]) != 0:
            raise RuntimeError(f"sciattn evaluate {run_dir} failed")
        zero_shot = {str(r["resolution"][0]): r["rel_l2"] for r in json.loads(eval_json.read_text())}
        rows.append({"seed": seed, "model": GT, "recipe": config, "parameters": metrics["parameters"],
                     "rel_l2": metrics["test"]["test_16x16"]["rel_l2"], "train_seconds": gt_seconds,
                     "zero_shot": zero_shot, "generated_scale_k": k})
        for name, recipe in recipes.items():
            err, n_params, seconds = train_fno(train, test, epochs=int(params["epochs"]), seed=seed, recipe=recipe)
            rows.append({"seed": seed, "model": "FNO", "recipe": name, "parameters": n_params, "rel_l2": err,
                         "train_seconds": seconds, "zero_shot": None, "generated_scale_k": k})
    return rows


SCHEMA = {"seed": "int", "model": "str", "recipe": "str", "parameters": "int", "rel_l2": "float",
          "train_seconds": "float", "zero_shot": "dict?", "generated_scale_k": "float"}
PARAMS = {"data": str(ROOT.parent / "shared" / "data"), "seeds": [0, 1, 2], "epochs": 15, "n_train": None,
          "recipes": list(FNO_RECIPES), "n_generated": 50, "n_calibration": 200, "out": None}
QUICK = {"seeds": [0], "epochs": 1, "n_train": 32, "recipes": ["neuralop_recipe"], "n_generated": 4,
         "n_calibration": 8}


def run(params: dict) -> list[dict]:
    data = Path(params["data"])
    if not (data / "darcy_train_16.pt").is_file() or not (data / "darcy_test_16.pt").is_file():
        raise FileNotFoundError(f"data: expected a folder holding darcy_train_16.pt and darcy_test_16.pt, "
                                f"got {str(data)!r}")
    _check(params)
    if params["out"] is not None:
        return compare(params, Path(params["out"]))
    with tempfile.TemporaryDirectory(prefix="darcy16_vs_fno_") as tmp:
        return compare(params, Path(tmp))


def _groups(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for rec in records:
        r = rec["row"]
        out.setdefault((r["model"], r["recipe"]), []).append(r)
    return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def table(records: list[dict]) -> str:
    """Mean ± std over the seeds of each model and recipe."""
    lines = ["| model | recipe | parameters | test rel. L2 (mean ± std) | seconds / run |", "|---|---|---|---|---|"]
    for (model, recipe), rows in _groups(records).items():
        m, s = _mean_std([r["rel_l2"] for r in rows])
        lines.append(f"| {model} | {recipe} | {rows[0]['parameters']:,} | {m:.4f} ± {s:.4f} | "
                     f"{statistics.fmean(r['train_seconds'] for r in rows):.0f} |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    p = records[0]["params"]
    groups = _groups(records)
    gt = [rows for (model, _), rows in groups.items() if model == GT][0]
    fno = {recipe: _mean_std([r["rel_l2"] for r in rows])[0] for (model, recipe), rows in groups.items()
           if model == "FNO"}
    best = min(fno, key=fno.get)
    gt_mean = _mean_std([r["rel_l2"] for r in gt])[0]
    res = list(gt[0]["zero_shot"])
    zs = {n: statistics.fmean(r["zero_shot"][n] for r in gt) for n in res}
    k = gt[0]["generated_scale_k"]
    n_train = "all" if p["n_train"] is None else p["n_train"]
    return "\n".join([
        f"Darcy 16×16 (neuraloperator files; training samples: {n_train}), {p['epochs']} epochs, seeds {p['seeds']}.",
        "",
        f"GT / best FNO ({best}): **{gt_mean / fno[best]:.2f}×**.",
        "",
        f"Zero-shot GT error (mean over the seeds) on solver-generated files in the same format (y = {k:.2f}·u, "
        "a ∈ {1, 12}):",
        "",
        "| resolution | " + " | ".join(res) + " |",
        "|---|" + "---|" * len(res),
        "| rel. L2 | " + " | ".join(f"{v:.4f}" for v in zs.values()) + " |",
    ])


BENCHMARKS = module_benchmarks(globals(), packages=("neuraloperator",),
    description="Galerkin Transformer (examples/configs/darcy16_galerkin.toml) against neuraloperator's FNO "
                "with three recipes on neuraloperator's darcy_train_16.pt / darcy_test_16.pt;",
    claim="the GT's test error is below the best FNO recipe's on the same data and epochs "
          "(docs/benchmarks/training.md)",
)
