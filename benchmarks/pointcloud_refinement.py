"""Point sets under refinement: published point-count balls against physically scaled balls (Erwin, BSA).

Two measurements, one table, one run (issue 26, items 6 and 7):

(a) **At initialisation.** A smooth two-channel field on ``[0, 1]²``,
    ``(sin 2πx · cos πy, exp(-4 |x - (0.4, 0.6)|²))``, sampled at 16,384 i.i.d. uniform points; the
    1,024- and 4,096-point sets are its first points (nested). Same weights (seed 1), no quadrature
    weights given (every point weighs the same, the sampling measure). Figure: the relative L2
    difference at the shared points, ``‖u_n - u_16384|_n‖ / ‖u_16384|_n‖``, and the ratio
    ``e_4096 / e_1024`` (first order in the point spacing ``h ∝ n^{-1/2}`` is 0.5 for 4× the points).

(b) **After training** with ``sciattn train`` on the irregular Darcy point sets (``darcy_irregular``,
    512 jittered points per sample with Delaunay weights, the data of
    ``examples/configs/darcy_points_erwin.toml``; a few CPU minutes per model), then
    ``sciattn evaluate RUN --resolutions 512 2048``: the same PDE samples at 4× the points.

Also (c) the mixing of Erwin's rotated tree in 3-D: the mean number of rotated-tree balls that the
points of one ball fall into (uniform points in the unit cube), for the plane rotation sciattn used
before and for Erwin's three Euler rotations (now the default).

Usage::

    python benchmarks/pointcloud_refinement.py [--epochs 6] [--n-train 200] [--out benchmarks/runs/pointcloud_refinement]

Writes the rows (date, hardware, versions, command) to ``benchmarks/results/pointcloud_refinement.json``
and the Markdown generated from them to ``benchmarks/results/pointcloud_refinement.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

from sciattn.balltree import build_ball_tree, rotation_matrix
from sciattn.operators import create_operator
from sciattn.train.checkpoint import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SIZES = (1024, 4096, 16384)
# (operator, label, extra model keys): published point counts as in examples/configs/darcy_points_erwin.toml
# for Erwin and at the registry defaults for BSA; physical = the registry defaults
MODELS = (
    ("erwin", "points", {"ball_mode": "points"}),
    ("erwin", "physical", {}),
    ("bsa_transformer", "points", {"ball_mode": "points"}),
    ("bsa_transformer", "physical", {}),
)


def smooth_field(p: torch.Tensor) -> torch.Tensor:
    """``(..., 2)`` positions -> ``(..., 2)`` features of the smooth test field."""
    x, y = p[..., 0], p[..., 1]
    return torch.stack([torch.sin(2 * math.pi * x) * torch.cos(math.pi * y),
                        torch.exp(-4 * ((x - 0.4) ** 2 + (y - 0.6) ** 2))], dim=-1)


def nested_points(n: int, seed: int = 0) -> torch.Tensor:
    """``(1, n, 2)`` uniform points in the unit square; the first ``m`` of them are the ``m``-point set."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, n, 2, generator=g, dtype=torch.float64).float()


def refinement_errors(name: str, sizes=SIZES, seed: int = 1, **config) -> list[float]:
    """Relative differences at shared points of each but the finest set from the finest, at init."""
    pts = nested_points(sizes[-1])
    torch.manual_seed(seed)
    model = create_operator(name, in_channels=2, out_channels=1, spatial_dims=2, **config).eval()
    with torch.no_grad():
        outs = [model(smooth_field(pts[:, :n]), pts[:, :n]) for n in sizes]
    ref = outs[-1]
    return [float((o - ref[:, : o.shape[1]]).norm() / ref[:, : o.shape[1]].norm()) for o in outs[:-1]]


def rotated_balls_per_ball(plane: bool, n: int = 4096, ball: int = 64, seed: int = 0) -> float:
    """Mean number of distinct rotated-tree balls (45°) holding the points of one ball, 3-D uniform points."""
    pos = torch.rand(4, n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    plain = build_ball_tree(pos, None, ball)
    rot = build_ball_tree(pos, None, ball, rotate=rotation_matrix(45.0, 3, torch.float64, plane=plane))
    rot_ball = torch.empty_like(rot.perm).scatter_(1, rot.perm, torch.arange(rot.perm.shape[1]).expand_as(rot.perm)
                                                   // ball)  # rotated ball of every point
    per = rot_ball.gather(1, plain.perm).view(4, -1, ball)  # the rotated balls of each plain ball's points
    counts = [len(set(row.tolist())) for row in per.reshape(-1, ball)]
    return sum(counts) / len(counts)


def _toml(name: str, extra: dict, epochs: int, n_train: int) -> str:
    model = {"name": name, **({"c_hidden": [32, 64], "enc_depths": [2, 2], "dec_depths": [2], "n_heads": 4}
                              if name == "erwin" else {"width": 32, "depth": 4, "n_heads": 4})}
    model.update(extra)
    if name == "erwin" and extra.get("ball_mode") == "points":
        model.update(ball_sizes=[32, 32], strides=[2])  # examples/configs/darcy_points_erwin.toml
    lines = ["[model]"] + [f"{k} = {json.dumps(v)}" for k, v in model.items()]
    lines += ["", "[data]", 'train = "darcy_irregular"', "resolution = 512", f"n_train = {n_train}", "n_test = 20",
              'options = { fine_resolution = 64, layout = "jittered" }', "",
              "[train]", f"epochs = {epochs}", "batch_size = 8", "lr = 1e-3", 'loss = "l2"', "seed = 0"]
    return "\n".join(lines) + "\n"


def train_and_sweep(name: str, label: str, extra: dict, out: Path, epochs: int, n_train: int) -> dict:
    from sciattn.train.cli import main as cli

    run_dir = out / f"{name}_{label}"
    cfg = out / f"{name}_{label}.toml"
    cfg.write_text(_toml(name, extra, epochs, n_train))
    started = time.perf_counter()
    if cli(["train", str(cfg), "--out", str(run_dir), "--no-progress", "--force"]) != 0:
        raise SystemExit(f"sciattn train failed for {name} ({label})")
    train_s = time.perf_counter() - started
    if cli(["evaluate", str(run_dir), "--resolutions", "512", "2048", "--n-samples", "20", "--no-progress",
            "--json", str(run_dir / "sweep.json")]) != 0:
        raise SystemExit(f"sciattn evaluate failed for {name} ({label})")
    report = json.loads((run_dir / "sweep.json").read_text())
    by_res = {int(r["resolution"]): r["rel_l2"] for r in report["rows"]}
    return {"train_seconds": train_s, "rel_l2_512": by_res.get(512), "rel_l2_2048": by_res.get(2048)}


def _markdown(result: dict) -> str:
    lines = [f"Command: `{result['command']}`; {result['date']}, {result['hardware']}, torch {result['torch']}, "
             f"python {result['python']}, {result['threads']} torch threads.", "",
             "(a) at initialisation, relative L2 difference at shared points from the 16,384-point output (nested "
             "uniform samples of a smooth field on [0,1]², no weights); (b) after "
             f"{result['epochs']} epochs on {result['n_train']} irregular Darcy samples of 512 points, relative L2 "
             "on 20 test samples at 512 and at 2,048 points (the same PDE samples).", "",
             "| operator | balls | init e_1024 | init e_4096 | e_4096 / e_1024 | trained @512 | trained @2048 | "
             "@2048 / @512 | train s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        def f(v, spec=".4f"):
            return "—" if v is None else format(v, spec)
        ratio = None if not (r.get("rel_l2_512") and r.get("rel_l2_2048")) else r["rel_l2_2048"] / r["rel_l2_512"]
        lines.append(f"| {r['operator']} | {r['balls']} | {f(r['init_e_1024'])} | {f(r['init_e_4096'])} | "
                     f"{f(r['init_e_4096'] / r['init_e_1024'], '.2f')} | {f(r.get('rel_l2_512'))} | "
                     f"{f(r.get('rel_l2_2048'))} | {f(ratio, '.2f')} | {f(r.get('train_seconds'), '.0f')} |")
    m = result["mixing"]
    lines += ["", f"(c) Erwin's rotated tree in 3-D (45°, balls of {m['ball']} of {m['n']} uniform points, 4 clouds): "
              f"rotated balls per ball {m['plane']:.2f} with the plane rotation (before), {m['euler']:.2f} with "
              "Erwin's three Euler rotations (now)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--n-train", type=int, default=200)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "runs" / "pointcloud_refinement")
    p.add_argument("--skip-training", action="store_true", help="only (a) and (c)")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, label, extra in MODELS:
        t = time.perf_counter()
        e1, e4 = refinement_errors(name, **extra)
        row = {"operator": name, "balls": label, "init_e_1024": e1, "init_e_4096": e4,
               "init_seconds": time.perf_counter() - t}
        print(row, flush=True)
        if not args.skip_training:
            row.update(train_and_sweep(name, label, extra, args.out, args.epochs, args.n_train))
            print(row, flush=True)
            shutil.rmtree(args.out / f"{name}_{label}" / "tensorboard", ignore_errors=True)
        rows.append(row)
    mixing = {"n": 4096, "ball": 64, "plane": rotated_balls_per_ball(True), "euler": rotated_balls_per_ball(False)}
    result = {
        "date": datetime.date.today().isoformat(),
        "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
        "command": "python benchmarks/pointcloud_refinement.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "epochs": args.epochs, "n_train": args.n_train, "rows": rows, "mixing": mixing,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes((json.dumps(result, indent=2) + "\n").encode(), args.results / "pointcloud_refinement.json")
    atomic_write_bytes(_markdown(result).encode(), args.results / "pointcloud_refinement.md")
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
