"""Point sets under refinement: published point-count balls against physically scaled balls (Erwin, BSA, MSPT's
patches), and Erwin's multiscale balls (its default).

Two measurements, one table, one run (issue 26, items 6 and 7), one row per operator and ball mode:

(a) **At initialisation.** A smooth two-channel field on ``[0, 1]²``,
    ``(sin 2πx · cos πy, exp(-4 |x - (0.4, 0.6)|²))``, sampled at ``sizes[-1]`` (16,384) i.i.d. uniform
    points; the smaller sets (1,024 and 4,096) are its first points (nested). Same weights (``seed``), no
    quadrature weights given (every point weighs the same, the sampling measure). Row field
    ``init_errors``: the relative L2 difference at the shared points, ``‖u_n - u_finest|_n‖ / ‖u_finest|_n‖``,
    for each but the finest of ``sizes``; the table shows the ratio ``e_4096 / e_1024`` (first order in the
    point spacing ``h ∝ n^{-1/2}`` is 0.5 for 4× the points).

(b) **After training** (``train``) with ``sciattn train`` on the irregular Darcy point sets
    (``darcy_irregular``, 512 jittered points per sample with Delaunay weights, the data of
    ``examples/configs/darcy_points_erwin.toml``; ``epochs`` epochs on ``n_train`` samples, a few CPU minutes
    per model at the defaults), then ``sciattn evaluate RUN --resolutions 512 2048`` on ``n_test`` samples:
    the same PDE samples at 4× the points (row fields ``rel_l2_512``, ``rel_l2_2048``). The runs are
    written under ``out``.

Also (c) the mixing of Erwin's rotated tree in 3-D (rows ``part="mixing"``): the mean number of rotated-tree
balls (45°) that the points of one ball fall into (``mixing_points`` uniform points in the unit cube, 4
clouds, balls of ``mixing_ball``), for the plane rotation sciattn used before and for Erwin's three Euler
rotations (now the default).

    python -m benchmarks run pointcloud_refinement [--quick] [--set epochs=5] [--set train=false]
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

from .harness import ROOT, int_param, module_benchmarks

OPERATORS = ("erwin", "bsa_transformer", "mspt")
BALLS = ("points", "physical", "multiscale")  # an operator runs the ones of its ball_modes
RESOLUTIONS = (512, 2048)


def smooth_field(p):
    """``(..., 2)`` positions -> ``(..., 2)`` features of the smooth test field."""
    import torch

    x, y = p[..., 0], p[..., 1]
    return torch.stack([torch.sin(2 * math.pi * x) * torch.cos(math.pi * y),
                        torch.exp(-4 * ((x - 0.4) ** 2 + (y - 0.6) ** 2))], dim=-1)


def nested_points(n: int, seed: int = 0):
    """``(1, n, 2)`` uniform points in the unit square; the first ``m`` of them are the ``m``-point set."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, n, 2, generator=g, dtype=torch.float64).float()


def model_keys(balls: str) -> dict:
    """The extra model keys of a ball mode: ``ball_mode`` given explicitly (BSA's registry default is the
    published point counts, Erwin's the multiscale balls), the other keys at the registry defaults."""
    return {"ball_mode": balls}


def refinement_errors(name: str, sizes=(1024, 4096, 16384), seed: int = 1, **config) -> list[float]:
    """Relative differences at shared points of each but the finest set from the finest, at init."""
    import torch

    from sciattn.operators import create_operator

    pts = nested_points(sizes[-1])
    torch.manual_seed(seed)
    model = create_operator(name, in_channels=2, out_channels=1, spatial_dims=2, **config).eval()
    with torch.no_grad():
        outs = [model(smooth_field(pts[:, :n]), pts[:, :n]) for n in sizes]
    ref = outs[-1]
    return [float((o - ref[:, : o.shape[1]]).norm() / ref[:, : o.shape[1]].norm()) for o in outs[:-1]]


def rotated_balls_per_ball(plane: bool, n: int = 4096, ball: int = 64, seed: int = 0) -> float:
    """Mean number of distinct rotated-tree balls (45°) holding the points of one ball, 3-D uniform points."""
    import torch

    from sciattn.balltree import build_ball_tree, rotation_matrix

    pos = torch.rand(4, n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    plain = build_ball_tree(pos, None, ball)
    rot = build_ball_tree(pos, None, ball, rotate=rotation_matrix(45.0, 3, torch.float64, plane=plane))
    rot_ball = torch.empty_like(rot.perm).scatter_(1, rot.perm, torch.arange(rot.perm.shape[1]).expand_as(rot.perm)
                                                   // ball)  # rotated ball of every point
    per = rot_ball.gather(1, plain.perm).view(4, -1, ball)  # the rotated balls of each plain ball's points
    counts = [len(set(row.tolist())) for row in per.reshape(-1, ball)]
    return sum(counts) / len(counts)


def config_toml(name: str, extra: dict, epochs: int, n_train: int, n_test: int) -> str:
    """The ``sciattn train`` configuration of one operator and ball mode."""
    model = {"name": name, **({"c_hidden": [32, 64], "enc_depths": [2, 2], "dec_depths": [2], "n_heads": 4}
                              if name == "erwin" else {"width": 32, "depth": 4, "n_heads": 4})}
    model.update(extra)
    if name == "erwin" and extra.get("ball_mode") == "points":
        model.update(ball_sizes=[32, 32], strides=[2])  # the published balls (the shipped config's --set hint)
    lines = ["[model]"] + [f"{k} = {json.dumps(v)}" for k, v in model.items()]
    lines += ["", "[data]", 'train = "darcy_irregular"', f"resolution = {RESOLUTIONS[0]}", f"n_train = {n_train}",
              f"n_test = {n_test}", 'options = { fine_resolution = 64, layout = "jittered" }', "",
              "[train]", f"epochs = {epochs}", "batch_size = 8", "lr = 1e-3", 'loss = "l2"', "seed = 0"]
    return "\n".join(lines) + "\n"


def train_and_sweep(name: str, label: str, out: Path, epochs: int, n_train: int, n_test: int) -> dict:
    """Train one model with ``sciattn train``, evaluate it at :data:`RESOLUTIONS` with ``sciattn evaluate``."""
    from sciattn.train.cli import main as cli

    run_dir = out / f"{name}_{label}"
    cfg = out / f"{name}_{label}.toml"
    cfg.write_text(config_toml(name, model_keys(label), epochs, n_train, n_test))
    started = time.perf_counter()
    if cli(["train", str(cfg), "--out", str(run_dir), "--no-progress", "--force"]) != 0:
        raise RuntimeError(f"sciattn train failed for {name} ({label}); its run folder is {run_dir}")
    train_s = time.perf_counter() - started
    if cli(["evaluate", str(run_dir), "--resolutions", *map(str, RESOLUTIONS), "--n-samples", str(n_test),
            "--no-progress", "--json", str(run_dir / "sweep.json")]) != 0:
        raise RuntimeError(f"sciattn evaluate failed for {name} ({label}); its run folder is {run_dir}")
    report = json.loads((run_dir / "sweep.json").read_text())
    by_res = {int(r["resolution"]): r["rel_l2"] for r in report["rows"]}
    shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    return {"train_seconds": train_s, "rel_l2_512": by_res.get(512), "rel_l2_2048": by_res.get(2048)}


def check(params: dict) -> dict:
    """``params`` with its values checked (a ValueError names the parameter)."""
    sizes = params["sizes"]
    if (not isinstance(sizes, list) or len(sizes) < 2 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                                                             for n in sizes) or sizes != sorted(set(sizes))):
        raise ValueError(f"sizes: expected at least two increasing point counts (the last is the reference), "
                         f"got {sizes!r}")
    for key, allowed in (("operators", OPERATORS), ("balls", BALLS)):
        v = params[key]
        if not isinstance(v, list) or not v or any(x not in allowed for x in v):
            raise ValueError(f"{key}: expected a non-empty list of {list(allowed)}, got {v!r}")
    if not isinstance(params["train"], bool):
        raise ValueError(f"train: expected true or false, got {params['train']!r}")
    for key in ("seed",):
        int_param(params, key, 0)
    for key in ("epochs", "n_train", "n_test", "mixing_points", "mixing_ball"):
        int_param(params, key)
    if params["mixing"] not in (True, False):
        raise ValueError(f"mixing: expected true or false, got {params['mixing']!r}")
    if not isinstance(params["out"], str) or not params["out"]:
        raise ValueError(f"out: expected a folder path (a string), got {params['out']!r}")
    return params


def run(params: dict) -> list[dict]:
    import torch

    p = check(params)
    torch.set_num_threads(1)
    out = Path(p["out"]) if Path(p["out"]).is_absolute() else ROOT / p["out"]
    rows = []
    from sciattn.operators.registry import operator_class

    for name in p["operators"]:
        for label in p["balls"]:
            if label not in operator_class(name).ball_modes:  # BSA has no multiscale mode
                continue
            t = time.perf_counter()
            errs = refinement_errors(name, p["sizes"], p["seed"], **model_keys(label))
            row = {"part": "refinement", "operator": name, "balls": label, "sizes": list(p["sizes"]),
                   "init_errors": errs, "init_seconds": time.perf_counter() - t, "train_seconds": None,
                   "rel_l2_512": None, "rel_l2_2048": None, "rotation": None, "rotated_balls_per_ball": None}
            if p["train"]:
                out.mkdir(parents=True, exist_ok=True)
                row.update(train_and_sweep(name, label, out, p["epochs"], p["n_train"], p["n_test"]))
            print(row, flush=True)
            rows.append(row)
    if p["mixing"]:
        for rotation in ("plane", "euler"):
            rows.append({"part": "mixing", "operator": "erwin", "balls": "points", "sizes": [p["mixing_points"]],
                         "init_errors": None, "init_seconds": None, "train_seconds": None, "rel_l2_512": None,
                         "rel_l2_2048": None, "rotation": rotation,
                         "rotated_balls_per_ball": rotated_balls_per_ball(rotation == "plane", p["mixing_points"],
                                                                          p["mixing_ball"])})
    return rows


# ---- table and notes, from the rows ------------------------------------------------------------------------------


def _f(v, spec=".4f"):
    return "—" if v is None else format(v, spec)


def _ratio(a, b):
    return None if a is None or not b else a / b


def table(records: list[dict]) -> str:
    rows = [r["row"] for r in records if r["row"]["part"] == "refinement"]
    params = records[0]["params"]
    if not rows:
        return "(no refinement rows in this run)\n"
    sizes = rows[0]["sizes"]
    coarse = sizes[:-1]
    trained = any(r["rel_l2_512"] is not None for r in rows)
    lines = [f"(a) at initialisation, relative L2 difference at shared points from the {sizes[-1]:,}-point output "
             "(nested uniform samples of a smooth field on [0,1]², no weights)"
             + (f"; (b) after {params['epochs']} epochs on {params['n_train']} irregular Darcy samples of 512 "
                f"points, relative L2 on {params['n_test']} test samples at 512 and at 2,048 points (the same PDE "
                "samples)." if trained else "; (b) not run (`train` false)."), ""]
    head = ["operator", "balls", *(f"init e_{n}" for n in coarse)]
    if len(coarse) >= 2:
        head.append(f"e_{coarse[-1]} / e_{coarse[-2]}")
    head += ["trained @512", "trained @2048", "@2048 / @512", "train s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        e = r["init_errors"]
        cells = [r["operator"], r["balls"], *(_f(x) for x in e)]
        if len(coarse) >= 2:
            cells.append(_f(_ratio(e[-1], e[-2]), ".2f"))
        cells += [_f(r["rel_l2_512"]), _f(r["rel_l2_2048"]), _f(_ratio(r["rel_l2_2048"], r["rel_l2_512"]), ".2f"),
                  _f(r["train_seconds"], ".0f")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def notes(records: list[dict]) -> str:
    mix = {r["row"]["rotation"]: r["row"] for r in records if r["row"]["part"] == "mixing"}
    if not mix:
        return "(c) not run (`mixing` false)."
    params = records[0]["params"]
    any_row = next(iter(mix.values()))
    parts = []
    if "plane" in mix:
        parts.append(f"rotated balls per ball {mix['plane']['rotated_balls_per_ball']:.2f} with the plane rotation "
                     "(before)")
    if "euler" in mix:
        parts.append(f"{mix['euler']['rotated_balls_per_ball']:.2f} with Erwin's three Euler rotations (now)")
    return (f"(c) Erwin's rotated tree in 3-D (45°, balls of {params['mixing_ball']} of {any_row['sizes'][0]} "
            f"uniform points, 4 clouds): {', '.join(parts)}.")


SCHEMA = {"part": "str", "operator": "str", "balls": "str", "sizes": "list", "init_errors": "list?",
          "init_seconds": "float?", "train_seconds": "float?", "rel_l2_512": "float?", "rel_l2_2048": "float?",
          "rotation": "str?", "rotated_balls_per_ball": "float?"}
PARAMS = {"sizes": [1024, 4096, 16384], "seed": 1, "operators": list(OPERATORS), "balls": list(BALLS),
          "train": True, "epochs": 6, "n_train": 200, "n_test": 20, "out": "benchmarks/runs/pointcloud_refinement",
          "mixing": True, "mixing_points": 4096, "mixing_ball": 64}
QUICK = {"sizes": [256, 1024, 2048], "epochs": 1, "n_train": 8, "n_test": 4, "mixing_points": 1024}

BENCHMARKS = module_benchmarks(globals(),
    description="Erwin, BSA and MSPT point sets under refinement, published point-count balls against physical "
                "balls (and Erwin's multiscale balls), at initialisation and after training;",
    claim="Erwin's physical and multiscale balls converge at first order at initialisation (e_4096 / e_1024 about "
          "0.5) and keep the trained error at 4× the points, its point-count balls do not converge "
          "(docs/fidelity.md)",
)
