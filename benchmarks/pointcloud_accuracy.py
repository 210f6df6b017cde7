"""Point-cloud accuracy: Erwin, BSA, the Galerkin Transformer and full attention, side by side in one run.

Part A, irregular Darcy (``sciattn.pde_data.irregular``): the FNO Darcy recipe solved at 128², the
pressure evaluated bilinearly at ``N`` uniform random points per sample (a new point set per
sample, corners included), Delaunay area weights. Input: the coefficient at the points.
Part B, irregular Navier–Stokes on the torus: ``w(t=0) -> w(t=1)`` (ν = 1e-3, FNO forcing, solved
at 64² with dt = 1e-3), trigonometric interpolation at ``N`` random points, periodic Delaunay weights.
Part C, ``mini_car.pt`` (``../shared/data``; skipped when absent): a smoke-scale fit of the surface
pressure, 3 586 points per car, train on cars 0-1, test on car 2.
Part D, timing at 2^10, 2^12 and 2^14 points: forward + backward of ONE block (pre-norm attention +
SwiGLU, same width and heads) per sample, same run: the BSA block, the dense full-attention block,
and for context Erwin's ball-attention block and a Galerkin block; the ball-tree build is timed apart.

Every model has about 70 k parameters (within 10 %), the same epochs, batch, optimiser (AdamW,
warm-up + cosine schedule, gradient clipping) and loss (relative L2 with the quadrature weights, in
physical units); the test metric is the same weighted relative L2. Full attention is the script's
``DenseTransformer``: the BSA/Erwin block structure with global softmax attention whose keys carry
the quadrature weights (``sciattn.weighted_softmax_attention``), no distance bias.

    python benchmarks/pointcloud_accuracy.py [--quick] [--threads 1] [--n-points 1024] [--epochs 8]

Writes benchmarks/results/pointcloud_accuracy.{json,md} (``--quick`` writes ``*_quick.*``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import time
from pathlib import Path

import torch
from torch import nn

from sciattn.balltree import BallAttention, BallSparseAttention, build_ball_tree
from sciattn.galerkin import GalerkinAttention
from sciattn.operators import create_operator
from sciattn.operators.erwin import PointBlock, SwiGLU, level_geometry, point_embedding
from sciattn.pde_data.irregular import generate_darcy_irregular, generate_navier_stokes_irregular
from sciattn.train.run import count_parameters
from sciattn.weighted_softmax import weighted_softmax_attention

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEADS, DEPTH, MLP, BALL, BLOCK, TOP_K = 32, 4, 4, 4, 64, 8, 4
RECIPE = dict(batch_size=4, lr=2e-3, weight_decay=1e-4, grad_clip=1.0, schedule="linear warm-up over 10% of the steps, then cosine to 0")


# ------------------------------------------------------------------------------------ full attention baseline


class DenseAttention(nn.Module):
    """Global softmax attention with key quadrature weights: ``z_i = Σ_j w_j e^{q_i·k_j/√D} v_j / Σ_j w_j e^{...}``.

    Shapes: ``h (B, N, C)``, ``weights (B, N)`` -> ``(B, N, C)``.
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        b, n, c = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        z = weighted_softmax_attention(q, k, v, weights)
        return self.proj(z.transpose(1, 2).reshape(b, n, c))


class DenseBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn, self.mlp = DenseAttention(dim, heads), SwiGLU(dim, mlp_ratio * dim)

    def forward(self, h, weights):
        h = h + self.attn(self.norm1(h), weights)
        return h + self.mlp(self.norm2(h))


class DenseTransformer(nn.Module):
    """``Embed([a, p])`` -> ``depth`` x DenseBlock -> ``Linear(RMSNorm h)``: BSATransformer with dense attention."""

    def __init__(self, in_channels, out_channels, spatial_dims, width, depth, heads, mlp_ratio) -> None:
        super().__init__()
        self.embed = point_embedding(in_channels, spatial_dims, width)
        self.blocks = nn.ModuleList(DenseBlock(width, heads, mlp_ratio) for _ in range(depth))
        self.norm, self.head = nn.RMSNorm(width), nn.Linear(width, out_channels)

    def forward(self, x, pos, weights=None):
        h = self.embed(torch.cat([x, pos], dim=-1))
        for blk in self.blocks:
            h = blk(h, weights)
        return self.head(self.norm(h))


class GalerkinBlock(nn.Module):
    """Timing only: ``h + Galerkin(h)`` then ``h + FFN(h)`` (the Galerkin Transformer's encoder layer)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.attn = GalerkinAttention(dim, heads, pos_dim=2)
        self.ffn = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, h, pos, weights):
        h = h + self.attn(h, pos, weights=weights)
        return h + self.ffn(h)


def make_models(cin: int, d: int) -> dict[str, nn.Module]:
    """The four models, about 70 k parameters each (printed and stored with the results)."""
    ops = {
        "Full attention": lambda: DenseTransformer(cin, 1, d, WIDTH, DEPTH, HEADS, MLP),
        "BSA": lambda: create_operator("bsa_transformer", in_channels=cin, out_channels=1, spatial_dims=d, width=WIDTH,
                                       depth=DEPTH, n_heads=HEADS, ball_size=BALL, block_size=BLOCK, top_k=TOP_K,
                                       mlp_ratio=MLP),
        "Erwin": lambda: create_operator("erwin", in_channels=cin, out_channels=1, spatial_dims=d, c_hidden=(16, 24, 32),
                                         ball_sizes=(BALL,) * 3, enc_depths=(2, 2, 2), dec_depths=(1, 1), strides=(4, 4),
                                         n_heads=HEADS, mlp_ratio=3),
        "Galerkin Transformer": lambda: create_operator("galerkin_transformer", in_channels=cin, out_channels=1,
                                                        spatial_dims=d, d_model=44, n_layers=DEPTH, n_heads=HEADS,
                                                        dim_ff=88, regressor="pointwise"),
    }
    return ops


def run_model(name, model, x, pos, w):
    if name == "Galerkin Transformer":
        return model(x, pos, w)
    return model(x, pos, weights=w)


# ------------------------------------------------------------------------------------ training


def stack(ds) -> dict[str, torch.Tensor]:
    out = {k: torch.stack([s[k] for s in ds]) for k in ("x", "y", "pos", "weights")}
    out["weights"] = out["weights"] / out["weights"].sum(1, keepdim=True)
    return out


def rel_l2(pred, y, w):
    """Per-sample ``sqrt(Σ_j w_j |p_j - y_j|² / Σ_j w_j |y_j|²)``, ``(B,)``."""
    return torch.sqrt((w[..., None] * (pred - y) ** 2).sum((1, 2)) / (w[..., None] * y**2).sum((1, 2)))


def fit(name, factory, train, test, epochs, seed, log) -> dict:
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


def run_task(label, train, test, cin, d, epochs, seed, log) -> dict:
    tr, te = stack(train), stack(test)
    log(f"{label}: {len(tr['x'])} train / {len(te['x'])} test samples of {tr['x'].shape[1]} points")
    out = {}
    for name, factory in make_models(cin, d).items():
        out[name] = fit(name, factory, tr, te, epochs, seed, log)
        r = out[name]
        log(f"{label} | {name}: {r['parameters']} params, test rel. L2 {r['test_rel_l2']:.4f}, {r['train_seconds']:.0f} s")
    return out


# ------------------------------------------------------------------------------------ timing


def best_time(fn, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def _time_size(n, blocks, reps) -> dict:
    bsa, erw, dense, gal = blocks
    pos = torch.rand(1, n, 2)
    w = torch.full((1, n), 1.0 / n)
    row = {"n": n, "tree_build_s": best_time(lambda: build_ball_tree(pos, None, BALL), reps)}
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
        row[name] = best_time(fn, reps if (name != "Dense full-attention block" or n <= 4096) else 1)
    return row


def time_blocks(sizes, reps, log) -> list[dict]:
    """Forward + backward of one block at ``B = 1`` (seconds per sample), random points in the unit square;
    the ball blocks run on a prebuilt tree (its build is timed separately)."""
    torch.manual_seed(0)
    blocks = (PointBlock(WIDTH, BallSparseAttention(WIDTH, HEADS, 2, BALL, block_size=BLOCK, top_k=TOP_K), MLP,
                         rotated=False),
              PointBlock(WIDTH, BallAttention(WIDTH, HEADS, 2, BALL), MLP, rotated=False),
              DenseBlock(WIDTH, HEADS, MLP), GalerkinBlock(WIDTH, HEADS))
    rows = []
    for n in sizes:
        rows.append(_time_size(n, blocks, reps))
        log(f"timing N={n}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in rows[-1].items() if k != "n"))
    return rows


# ------------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (< 2 minutes)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-points", type=int, default=1024)
    ap.add_argument("--n-train", type=int, default=96)
    ap.add_argument("--n-test", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--epochs-car", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn/generated").expanduser())
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.quick:
        args.n_points, args.n_train, args.n_test, args.epochs, args.epochs_car = 256, 8, 4, 1, 1
    sizes = [1 << 10, 1 << 12] if args.quick else [1 << 10, 1 << 12, 1 << 14]
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.0f} s] {msg}", flush=True)

    n_all = args.n_train + args.n_test
    fine_darcy, fine_ns = (64, 32) if args.quick else (128, 64)
    darcy = generate_darcy_irregular(n_all, args.n_points, fine_resolution=fine_darcy, seed=args.seed,
                                     cache_dir=args.cache)
    ns_params = dict(t_final=1.0, dt=1e-3, record_steps=1, nu=1e-3)
    ns = generate_navier_stokes_irregular(n_all, args.n_points, fine_resolution=fine_ns,
                                          seed=args.seed, inputs=(0,), outputs=(1,), cache_dir=args.cache, **ns_params)
    log("data ready")
    split = lambda ds: (ds.samples[: args.n_train], ds.samples[args.n_train :])  # noqa: E731
    part_a = run_task("darcy_irregular", *split(darcy), 1, 2, args.epochs, args.seed, log)
    part_b = run_task("navier_stokes_irregular", *split(ns), 1, 2, args.epochs, args.seed, log)
    te = stack(split(ns)[1])
    persistence = float(rel_l2(te["x"], te["y"], te["weights"]).mean())

    part_c = None
    car_path = args.data / "mini_car.pt"
    if car_path.is_file():
        from sciattn.pde_data.shapenet_car import load_mini_car

        cars = load_mini_car(car_path).samples
        part_c = run_task("mini_car", cars[:2], cars[2:], 6, 3, args.epochs_car, args.seed, log)
    else:
        log(f"mini_car skipped: {car_path} not found")

    timing = time_blocks(sizes, 2 if args.quick else 3, log)
    elapsed = time.perf_counter() - t_start

    big = timing[-1]
    ratio_time = big["BSA block"] / big["Dense full-attention block"]
    ratio_err = part_a["BSA"]["test_rel_l2"] / part_a["Full attention"]["test_rel_l2"]
    target = {"accuracy_n_points": args.n_points, "bsa_over_full_test_error": ratio_err,
              "timing_n_points": big["n"], "bsa_over_dense_block_time": ratio_time,
              "met": bool(ratio_err <= 1.05 and ratio_time <= 0.25)}
    summary = {"benchmark": "pointcloud_accuracy", "date": datetime.date.today().isoformat(),
               "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), CPU",
               "load_average_start_end": [load0, os.getloadavg()[0]], "torch": torch.__version__,
               "command": "python benchmarks/pointcloud_accuracy.py" + (" --quick" if args.quick else ""),
               "elapsed_seconds": elapsed, "quick": args.quick, "seed": args.seed, "recipe": RECIPE,
               "epochs": args.epochs, "epochs_car": args.epochs_car, "n_points": args.n_points,
               "n_train": args.n_train, "n_test": args.n_test, "fine_darcy": fine_darcy, "fine_ns": fine_ns,
               "ns_params": ns_params,
               "config": {"width": WIDTH, "heads": HEADS, "depth": DEPTH, "mlp_ratio": MLP, "ball": BALL,
                          "block": BLOCK, "top_k": TOP_K},
               "darcy_irregular": part_a, "navier_stokes_irregular": part_b,
               "navier_stokes_persistence_rel_l2": persistence, "mini_car": part_c, "timing": timing, "target": target}
    args.results.mkdir(parents=True, exist_ok=True)
    stem = "pointcloud_accuracy" + ("_quick" if args.quick else "")
    (args.results / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.results / f"{stem}.md").write_text(markdown(summary, args) + "\n")
    print(markdown(summary, args))


def markdown(s, args) -> str:
    def table(part, extra=""):
        rows = ["| model | parameters | test rel. L2 (mean ± std) | last-epoch train rel. L2 | train s | s / sample step |",
                "|---|---|---|---|---|---|"]
        for name, r in part.items():
            rows.append(f"| {name} | {r['parameters']:,} | {r['test_rel_l2']:.4f} ± {r['test_rel_l2_std']:.4f} | "
                        f"{r['train_rel_l2_last_epoch']:.4f} | {r['train_seconds']:.0f} | "
                        f"{r['seconds_per_training_sample']:.3f} |")
        return rows

    t = s["target"]
    lines = [
        f"Point-cloud accuracy, one seed ({s['seed']}), {s['date']}, {s['machine']} on 2 shared cores (load average "
        f"{s['load_average_start_end'][0]:.1f} at the start, {s['load_average_start_end'][1]:.1f} at the end), "
        f"torch {s['torch']}. Command: `{s['command']}` ({s['elapsed_seconds']:.0f} s).", "",
        f"All models: {s['epochs']} epochs, batch {s['recipe']['batch_size']}, AdamW lr {s['recipe']['lr']} (warm-up 10 %, cosine), "
        "loss and metric = relative L2 weighted by the quadrature (area) weights, in physical units. Flat models: "
        f"width {WIDTH}, {DEPTH} blocks, {HEADS} heads, SwiGLU x{MLP}; BSA ball {BALL}, blocks of {BLOCK}, top-{TOP_K}; "
        "Erwin U-Net c = (16, 24, 32), strides 4, balls 64; Galerkin d_model 44, pointwise regressor; full attention = "
        "dense softmax attention with key weights (script-local `DenseTransformer`).", "",
        f"**A. Irregular Darcy** (`darcy_irregular`): {s['n_train']} train / {s['n_test']} test samples, "
        f"N = {s['n_points']} uniform random points per sample (a new set per sample), solve grid {s['fine_darcy']}², "
        "Delaunay weights.",
        "", *table(s["darcy_irregular"]), "",
        f"**B. Irregular Navier–Stokes** (`navier_stokes_irregular`, torus, w(t=0) -> w(t=1), ν = 1e-3, solve grid "
        f"{s['fine_ns']}², trigonometric interpolation, periodic Delaunay weights): same sizes. "
        f"Persistence (predict y = x): {s['navier_stokes_persistence_rel_l2']:.4f}.", "",
        *table(s["navier_stokes_irregular"]), ""]
    if s["mini_car"] is not None:
        lines += [f"**C. mini_car smoke fit** (3 586 surface points, 3-D; train on cars 0-1, test on car 2; "
                  f"{s['epochs_car']} epochs; vertex-area weights). Two training samples: a smoke test of the "
                  "pipeline, not a benchmark.", "", *table(s["mini_car"]), ""]
    else:
        lines += ["**C. mini_car**: skipped (../shared/data/mini_car.pt not found).", ""]
    lines += ["**D. One block, forward + backward, B = 1, width 32, 4 heads (ms per sample; best of repeats; the "
              "dense block once at 2^14)**:", "",
              "| N | tree build | BSA block | Erwin ball block | dense full-attention block | Galerkin block | BSA / dense |",
              "|---|---|---|---|---|---|---|"]
    for r in s["timing"]:
        lines.append(f"| {r['n']} | {r['tree_build_s'] * 1e3:.1f} | {r['BSA block'] * 1e3:.1f} | "
                     f"{r['Erwin ball-attention block'] * 1e3:.1f} | {r['Dense full-attention block'] * 1e3:.1f} | "
                     f"{r['Galerkin block'] * 1e3:.1f} | {r['BSA block'] / r['Dense full-attention block']:.3f} |")
    lines += ["", f"**Target** (BSA within 5 % of full attention's test error on irregular Darcy at ≤ 1/4 of its time "
              f"at 2^14 points): accuracy compared at N = {t['accuracy_n_points']} (where full attention trains in the "
              f"CPU budget), BSA / full test error = {t['bsa_over_full_test_error']:.3f}; time compared per block at "
              f"N = {t['timing_n_points']}, BSA / dense = {t['bsa_over_dense_block_time']:.3f}. "
              f"**{'Met' if t['met'] else 'Not met'}.**"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
