"""Point-cloud accuracy: Erwin, BSA, the Galerkin Transformer and full attention, side by side in one run.

Tasks (parameter ``tasks``), one row per task and model:

* ``darcy_irregular`` (A, ``sciattn.pde_data.irregular``): the FNO Darcy recipe solved at ``fine_darcy``², the
  pressure evaluated bilinearly at ``n_points`` uniform random points per sample (a new point set per sample,
  corners included), Delaunay area weights. Input: the coefficient at the points.
* ``navier_stokes_irregular`` (B): ``w(t=0) -> w(t=1)`` on the torus (ν = 1e-3, FNO forcing, solved at
  ``fine_ns``² with dt = 1e-3), trigonometric interpolation at ``n_points`` random points, periodic Delaunay
  weights; one more row, model ``Persistence (y = x)``, holds the test error of predicting the input.
* ``mini_car`` (C): ``mini_car.pt`` of the mini ShapeNet-Car files in the folder ``data`` (default
  ``../shared/data``; a missing folder or file is a FileNotFoundError naming ``data``): a smoke-scale fit of
  the surface pressure, 3 586 points per car, train on cars 0-1, test on car 2, ``epochs_car`` epochs.
* ``timing`` (D), at ``sizes`` points: forward + backward of ONE block (pre-norm attention + SwiGLU, same width
  and heads) per sample, best of ``reps`` (the dense block once above 4,096 points): the BSA block, the dense
  full-attention block, and for context Erwin's ball-attention block and a Galerkin block; the ball-tree build
  is timed apart (rows ``task="timing"``, the block in ``model``, seconds in ``seconds``).

Every model (parameter ``models``) has about 70 k parameters (within 10 %), the same ``epochs``, batch,
optimiser (AdamW, warm-up + cosine schedule, gradient clipping) and loss (relative L2 with the quadrature
weights, in physical units); the test metric is the same weighted relative L2. Full attention is
``benchmarks/_pointcloud_models.py``'s ``DenseTransformer``: the BSA/Erwin block structure with global softmax
attention whose keys carry the quadrature weights (``sciattn.weighted_softmax_attention``), no distance bias.
The notes check the target (BSA within 5 % of full attention's test error on irregular Darcy, at ≤ 1/4 of its
block time at the largest of ``sizes``) from the rows.

    python -m benchmarks run pointcloud_accuracy [--quick] [--set epochs=8] [--set data='"/path/to/data"']
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from ._timing import best_time
from .harness import ROOT, int_param, module_benchmarks

RECIPE = dict(batch_size=4, lr=2e-3, weight_decay=1e-4, grad_clip=1.0,
              schedule="linear warm-up over 10% of the steps, then cosine to 0")
TASKS = ("darcy_irregular", "navier_stokes_irregular", "mini_car", "timing")
MODELS = ("Full attention", "BSA", "Erwin", "Galerkin Transformer")
PERSISTENCE = "Persistence (y = x)"
BLOCKS = ("tree build", "BSA block", "Erwin ball-attention block", "Dense full-attention block", "Galerkin block")
NS_PARAMS = dict(t_final=1.0, dt=1e-3, record_steps=1, nu=1e-3)


# ------------------------------------------------------------------------------------ training


def stack(ds) -> dict:
    import torch

    out = {k: torch.stack([s[k] for s in ds]) for k in ("x", "y", "pos", "weights")}
    out["weights"] = out["weights"] / out["weights"].sum(1, keepdim=True)
    return out


def rel_l2(pred, y, w):
    """Per-sample ``sqrt(Σ_j w_j |p_j - y_j|² / Σ_j w_j |y_j|²)``, ``(B,)``."""
    import torch

    return torch.sqrt((w[..., None] * (pred - y) ** 2).sum((1, 2)) / (w[..., None] * y**2).sum((1, 2)))


def fit(name, factory, train, test, epochs, seed, log) -> dict:
    import torch
    from torch import nn

    from sciattn.train.training.run import count_parameters

    from ._pointcloud_models import run_model

    torch.manual_seed(seed)
    model = factory()
    xm, xs = train["x"].mean((0, 1)), train["x"].std((0, 1)).clamp_min(1e-8)
    ym, ys = train["y"].mean((0, 1)), train["y"].std((0, 1)).clamp_min(1e-8)
    n, bs = len(train["x"]), RECIPE["batch_size"]
    steps = epochs * math.ceil(n / bs)
    opt = torch.optim.AdamW(model.parameters(), lr=RECIPE["lr"], weight_decay=RECIPE["weight_decay"])
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warm if s < warm else
                                              0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))

    def predict(d, idx):
        return run_model(name, model, (d["x"][idx] - xm) / xs, d["pos"][idx], d["weights"][idx]) * ys + ym

    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    curve = []
    for ep in range(epochs):
        model.train()
        perm, tot = torch.randperm(n, generator=g), 0.0
        for s in range(0, n, bs):
            idx = perm[s : s + bs]
            loss = rel_l2(predict(train, idx), train["y"][idx], train["weights"][idx]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), RECIPE["grad_clip"])
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(idx)
        curve.append(tot / n)
        log(f"  {name}: epoch {ep + 1}/{epochs} train rel. L2 {curve[-1]:.4f} ({time.perf_counter() - t0:.0f} s)")
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        t1 = time.perf_counter()
        errs = torch.cat([rel_l2(predict(test, torch.arange(s, min(s + bs, len(test["x"])))),
                                 test["y"][s : s + bs], test["weights"][s : s + bs])
                          for s in range(0, len(test["x"]), bs)])
        infer = (time.perf_counter() - t1) / len(test["x"])
    return {"parameters": count_parameters(model), "train_seconds": seconds,
            "seconds_per_training_sample": seconds / (epochs * n), "inference_seconds_per_sample": infer,
            "train_rel_l2_last_epoch": curve[-1], "test_rel_l2": float(errs.mean()),
            "test_rel_l2_std": float(errs.std()) if len(errs) > 1 else 0.0,
            "train_curve": curve}


def _row(task, model, points, **fields) -> dict:
    row = {"task": task, "model": model, "points": points, **{f: None for f in SCHEMA if f not in ("task", "model",
                                                                                                  "points")}}
    row.update(fields)
    return row


def run_task(label, train, test, cin, d, epochs, seed, models, log) -> list[dict]:
    from ._pointcloud_models import make_models

    tr, te = stack(train), stack(test)
    points = int(tr["x"].shape[1])
    log(f"{label}: {len(tr['x'])} train / {len(te['x'])} test samples of {points} points")
    rows = []
    for name, factory in make_models(cin, d).items():
        if name not in models:
            continue
        r = fit(name, factory, tr, te, epochs, seed, log)
        rows.append(_row(label, name, points, **r))
        log(f"{label} | {name}: {r['parameters']} params, test rel. L2 {r['test_rel_l2']:.4f}, "
            f"{r['train_seconds']:.0f} s")
    return rows


# ------------------------------------------------------------------------------------ timing


def _time_size(n, blocks, reps) -> dict:
    import torch

    from sciattn.balltree import build_ball_tree
    from sciattn.operators.erwin import level_geometry

    from ._pointcloud_models import BALL, WIDTH

    bsa, erw, dense, gal = blocks
    pos = torch.rand(1, n, 2)
    w = torch.full((1, n), 1.0 / n)
    out = {"tree build": best_time(lambda: build_ball_tree(pos, None, BALL), reps)}
    tree = build_ball_tree(pos, None, BALL)
    geo = level_geometry(tree.pos, tree.mask, tree.values_to_tree(w), BALL, None)
    h = torch.randn(1, n, WIDTH, requires_grad=True)
    ht = tree.to_tree(h.detach()).requires_grad_()
    cases = {"BSA block": lambda: bsa(ht, geo).square().mean().backward(),
             "Erwin ball-attention block": lambda: erw(ht, geo).square().mean().backward(),
             "Dense full-attention block": lambda: dense(h, w).square().mean().backward(),
             "Galerkin block": lambda: gal(h, pos, w).square().mean().backward()}
    for name, fn in cases.items():
        fn()  # warm-up
        out[name] = best_time(fn, reps if (name != "Dense full-attention block" or n <= 4096) else 1)
    return out


def time_blocks(sizes, reps, log) -> list[dict]:
    """Forward + backward of one block at ``B = 1`` (seconds per sample), random points in the unit square;
    the ball blocks run on a prebuilt tree (its build is timed separately). One row per size and block."""
    import torch

    from sciattn.balltree import BallAttention, BallSparseAttention
    from sciattn.operators.erwin import PointBlock

    from ._pointcloud_models import BALL, BLOCK, HEADS, MLP, TOP_K, WIDTH, DenseBlock, GalerkinBlock

    torch.manual_seed(0)
    blocks = (PointBlock(WIDTH, BallSparseAttention(WIDTH, HEADS, 2, BALL, block_size=BLOCK, top_k=TOP_K), MLP,
                         rotated=False),
              PointBlock(WIDTH, BallAttention(WIDTH, HEADS, 2, BALL), MLP, rotated=False),
              DenseBlock(WIDTH, HEADS, MLP), GalerkinBlock(WIDTH, HEADS))
    rows = []
    for n in sizes:
        times = _time_size(n, blocks, reps)
        rows += [_row("timing", name, n, seconds=s) for name, s in times.items()]
        log(f"timing N={n}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in times.items()))
    return rows


# ------------------------------------------------------------------------------------ the harness entry


def _subset(params, key, allowed):
    v = params[key]
    if not isinstance(v, list) or not v or any(x not in allowed for x in v):
        raise ValueError(f"{key}: expected a non-empty list of {list(allowed)}, got {v!r}")
    return v


def car_file(params: dict) -> Path:
    """``data/mini_car.pt``; a FileNotFoundError naming ``data`` when the folder or the file is missing."""
    data = params["data"]
    if not isinstance(data, str) or not data:
        raise ValueError(f"data: expected the folder of the mini ShapeNet-Car files (a string), got {data!r}")
    folder = Path(data).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"data: expected a folder holding mini_car.pt (the mini ShapeNet-Car files), "
                                f"got {data!r}, which is not a folder")
    path = folder / "mini_car.pt"
    if not path.is_file():
        raise FileNotFoundError(f"data: expected a folder holding mini_car.pt, got {data!r} without it")
    return path


def check(params: dict) -> dict:
    """``params`` with its values checked (a ValueError names the parameter)."""
    _subset(params, "tasks", TASKS)
    _subset(params, "models", MODELS)
    for key in ("n_points", "n_train", "n_test", "epochs", "epochs_car", "threads", "reps", "fine_darcy", "fine_ns"):
        int_param(params, key)
    int_param(params, "seed", 0)
    if params["n_points"] < 4:
        raise ValueError(f"n_points: expected at least 4 points per sample (a Delaunay triangulation), "
                         f"got {params['n_points']!r}")
    sizes = params["sizes"]
    if not isinstance(sizes, list) or not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 2
                                                       for n in sizes):
        raise ValueError(f"sizes: expected a non-empty list of point counts >= 2, got {sizes!r}")
    if not isinstance(params["cache"], str) or not params["cache"]:
        raise ValueError(f"cache: expected a folder path (a string), got {params['cache']!r}")
    if "mini_car" in params["tasks"]:
        car_file(params)
    return params


def run(params: dict) -> list[dict]:
    import torch

    p = check(params)
    torch.set_num_threads(p["threads"])
    t_start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.0f} s] {msg}", flush=True)

    cache = Path(p["cache"]).expanduser()
    n_all, n_train, seed = p["n_train"] + p["n_test"], p["n_train"], p["seed"]
    rows = []
    if "darcy_irregular" in p["tasks"]:
        from sciattn.pde_data.irregular import generate_darcy_irregular

        darcy = generate_darcy_irregular(n_all, p["n_points"], fine_resolution=p["fine_darcy"], seed=seed,
                                         cache_dir=cache)
        rows += run_task("darcy_irregular", darcy.samples[:n_train], darcy.samples[n_train:], 1, 2, p["epochs"], seed,
                         p["models"], log)
    if "navier_stokes_irregular" in p["tasks"]:
        from sciattn.pde_data.irregular import generate_navier_stokes_irregular

        ns = generate_navier_stokes_irregular(n_all, p["n_points"], fine_resolution=p["fine_ns"], seed=seed,
                                              inputs=(0,), outputs=(1,), cache_dir=cache, **NS_PARAMS)
        rows += run_task("navier_stokes_irregular", ns.samples[:n_train], ns.samples[n_train:], 1, 2, p["epochs"],
                         seed, p["models"], log)
        te = stack(ns.samples[n_train:])
        rows.append(_row("navier_stokes_irregular", PERSISTENCE, int(te["x"].shape[1]),
                         test_rel_l2=float(rel_l2(te["x"], te["y"], te["weights"]).mean())))
    if "mini_car" in p["tasks"]:
        from sciattn.pde_data.shapenet_car import load_mini_car

        cars = load_mini_car(car_file(p)).samples
        rows += run_task("mini_car", cars[:2], cars[2:], 6, 3, p["epochs_car"], seed, p["models"], log)
    if "timing" in p["tasks"]:
        rows += time_blocks(p["sizes"], p["reps"], log)
    return rows


# ------------------------------------------------------------------------------------ table and notes, from the rows


def _task_table(rows) -> list[str]:
    out = ["| model | parameters | test rel. L2 (mean ± std) | last-epoch train rel. L2 | train s | s / sample step |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if r["model"] == PERSISTENCE:
            continue
        out.append(f"| {r['model']} | {r['parameters']:,} | {r['test_rel_l2']:.4f} ± {r['test_rel_l2_std']:.4f} | "
                   f"{r['train_rel_l2_last_epoch']:.4f} | {r['train_seconds']:.0f} | "
                   f"{r['seconds_per_training_sample']:.3f} |")
    return out


def _ms(v):
    return "—" if v is None else f"{v * 1e3:.1f}"


def table(records: list[dict]) -> str:
    p = records[0]["params"]
    rows = [r["row"] for r in records]
    by = {t: [r for r in rows if r["task"] == t] for t in TASKS}
    lines = []
    if by["darcy_irregular"]:
        n = by["darcy_irregular"][0]["points"]
        lines += [f"**A. Irregular Darcy** (`darcy_irregular`): {p['n_train']} train / {p['n_test']} test samples, "
                  f"N = {n} uniform random points per sample (a new set per sample), solve grid {p['fine_darcy']}², "
                  "Delaunay weights.", "", *_task_table(by["darcy_irregular"]), ""]
    if by["navier_stokes_irregular"]:
        pers = [r["test_rel_l2"] for r in by["navier_stokes_irregular"] if r["model"] == PERSISTENCE]
        lines += [f"**B. Irregular Navier–Stokes** (`navier_stokes_irregular`, torus, w(t=0) -> w(t=1), ν = 1e-3, "
                  f"solve grid {p['fine_ns']}², trigonometric interpolation, periodic Delaunay weights): same sizes."
                  + (f" Persistence (predict y = x): {pers[0]:.4f}." if pers else ""), "",
                  *_task_table(by["navier_stokes_irregular"]), ""]
    if by["mini_car"]:
        n = by["mini_car"][0]["points"]
        lines += [f"**C. mini_car smoke fit** ({n:,} surface points, 3-D; train on cars 0-1, test on car 2; "
                  f"{p['epochs_car']} epochs; vertex-area weights). Two training samples: a smoke test of the "
                  "pipeline, not a benchmark.", "", *_task_table(by["mini_car"]), ""]
    if by["timing"]:
        sizes = list(dict.fromkeys(r["points"] for r in by["timing"]))
        t = {(r["points"], r["model"]): r["seconds"] for r in by["timing"]}
        lines += ["**D. One block, forward + backward, B = 1, width 32, 4 heads (ms per sample; best of repeats; the "
                  "dense block once above 4,096 points)**:", "",
                  "| N | tree build | BSA block | Erwin ball block | dense full-attention block | Galerkin block | "
                  "BSA / dense |", "|---|---|---|---|---|---|---|"]
        for n in sizes:
            bsa, dense = t.get((n, "BSA block")), t.get((n, "Dense full-attention block"))
            ratio = "—" if bsa is None or not dense else f"{bsa / dense:.3f}"
            lines.append(f"| {n} | " + " | ".join(_ms(t.get((n, b))) for b in BLOCKS) + f" | {ratio} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def target(records: list[dict]) -> dict | None:
    """The target from the rows: BSA / full test error on irregular Darcy and BSA / dense block time at the largest
    timed size; ``None`` when the run lacks those rows."""
    rows = [r["row"] for r in records]
    err = {r["model"]: r["test_rel_l2"] for r in rows if r["task"] == "darcy_irregular"}
    timing = [r for r in rows if r["task"] == "timing"]
    if not timing or "BSA" not in err or "Full attention" not in err:
        return None
    big = max(r["points"] for r in timing)
    t = {r["model"]: r["seconds"] for r in timing if r["points"] == big}
    if "BSA block" not in t or "Dense full-attention block" not in t:
        return None
    ratio_err = err["BSA"] / err["Full attention"]
    ratio_time = t["BSA block"] / t["Dense full-attention block"]
    n = next(r["points"] for r in rows if r["task"] == "darcy_irregular")
    return {"accuracy_n_points": n, "bsa_over_full_test_error": ratio_err, "timing_n_points": big,
            "bsa_over_dense_block_time": ratio_time, "met": ratio_err <= 1.05 and ratio_time <= 0.25}


def notes(records: list[dict]) -> str:
    from_models = "`benchmarks/_pointcloud_models.py`"
    p = records[0]["params"]
    lines = [f"All models: {p['epochs']} epochs, batch {RECIPE['batch_size']}, AdamW lr {RECIPE['lr']} (warm-up 10 %, "
             "cosine), loss and metric = relative L2 weighted by the quadrature (area) weights, in physical units, "
             f"seed {p['seed']}. Flat models: width 32, 4 blocks, 4 heads, SwiGLU x4; BSA ball 64, blocks of 8, "
             "top-4; Erwin U-Net c = (16, 24, 32), strides 4, balls 64; Galerkin d_model 44, pointwise regressor; "
             f"full attention = dense softmax attention with key weights (`DenseTransformer` of {from_models})."]
    t = target(records)
    if t is not None:
        lines += ["", f"**Target** (BSA within 5 % of full attention's test error on irregular Darcy at ≤ 1/4 of its "
                  f"time at the largest timed size): accuracy compared at N = {t['accuracy_n_points']}, BSA / full "
                  f"test error = {t['bsa_over_full_test_error']:.3f}; time compared per block at "
                  f"N = {t['timing_n_points']}, BSA / dense = {t['bsa_over_dense_block_time']:.3f}. "
                  f"**{'Met' if t['met'] else 'Not met'}.**"]
    return "\n".join(lines) + "\n"


SCHEMA = {"task": "str", "model": "str", "points": "int", "parameters": "int?", "test_rel_l2": "float?",
          "test_rel_l2_std": "float?", "train_rel_l2_last_epoch": "float?", "train_seconds": "float?",
          "seconds_per_training_sample": "float?", "inference_seconds_per_sample": "float?", "train_curve": "list?",
          "seconds": "float?"}
PARAMS = {"tasks": list(TASKS), "models": list(MODELS), "n_points": 1024, "n_train": 96, "n_test": 32, "epochs": 8,
          "epochs_car": 16, "seed": 0, "threads": 1, "fine_darcy": 128, "fine_ns": 64, "sizes": [1 << 10, 1 << 12, 1 << 14],
          "reps": 3, "data": str(ROOT.parent / "shared" / "data"), "cache": "~/.cache/sciattn/generated"}
QUICK = {"n_points": 256, "n_train": 8, "n_test": 4, "epochs": 1, "epochs_car": 1, "fine_darcy": 64, "fine_ns": 32,
         "sizes": [1 << 10, 1 << 12], "reps": 2}

BENCHMARKS = module_benchmarks(globals(),
    description="Point-cloud accuracy of full attention, BSA, Erwin and the Galerkin Transformer (irregular Darcy, "
                "irregular Navier–Stokes, mini_car) and one block's forward + backward time, one seed, CPU;",
    claim="BSA within 5 % of full attention's test error on irregular Darcy at ≤ 1/4 of its block time at 2^14 "
          "points (docs/benchmarks/point_clouds.md)",
)
