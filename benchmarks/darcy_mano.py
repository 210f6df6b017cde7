"""MANO against the Galerkin Transformer and FNO on Darcy flow, side by side in one run.

Part A, real data: neuraloperator's 16×16 files (``../shared/data``), 15 epochs each.
Part B, built-in solver: trained at 64×64, tested at 64 and zero-shot at 128 (2×) and 256 (4×);
every sample is solved once at 256×256 and restricted.

All three models use the same trainer and recipe (AdamW, OneCycle, relative L2 + H1, batch 8,
lr 2e-3). MANO's architecture is read from ``examples/configs/darcy64_mano.toml`` (its
``[model]`` section): physical windows (1/8 of the domain) and a lift stencil and
relative-position bias given in physical units, so its neighbourhoods are the same at every
resolution. Two of those parameters are stated for a training resolution ``n``
(``lift_spacing = 1/n``, ``rel_pos_bias`` = window cells at ``n``); Part A trains at 16² and
sets them for 16². The Galerkin Transformer uses its latent grid at the training resolution; FNO
keeps its 8×8 modes.

    python benchmarks/darcy_mano.py [--n-train 500] [--epochs 10] [--data ../shared/data]

Writes benchmarks/results/darcy_mano.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from pathlib import Path

import torch

from sciattn.operators import create_operator
from sciattn.pde_data.normalizers import fit_normalizers
from sciattn.train.config import DataConfig, load_config
from sciattn.train.data import build_datasets
from sciattn.train.run import count_parameters
from sciattn.train.trainer import Trainer, evaluate_dataset

ROOT = Path(__file__).resolve().parents[1]
RECIPE = dict(batch_size=8, lr=2e-3, weight_decay=1e-4, scheduler="onecycle", loss="l2+h1", h1_weight=1.0,
              grad_clip=1.0)
MANO_CONFIG = ROOT / "examples" / "configs" / "darcy64_mano.toml"


def mano_params(resolution: int) -> dict:
    """MANO's ``[model]`` parameters from the example config, with the two resolution-stated ones
    (lift stencil spacing, relative-position table) set for training at ``resolution``."""
    params = dict(load_config(MANO_CONFIG).model_params)
    if params.get("lift_stencil", 1) > 1:
        params["lift_spacing"] = 1.0 / resolution
    if params.get("rel_pos_bias", 0) and params.get("window_fraction") is not None:
        params["rel_pos_bias"] = max(1, round(params["window_fraction"] * resolution))
    return params


def models(latent: int) -> dict[str, torch.nn.Module]:
    from neuralop.models import FNO

    return {
        "MANO": create_operator("mano", in_channels=1, out_channels=1, **mano_params(latent)),
        "Galerkin Transformer": create_operator(
            "galerkin_transformer", in_channels=1, out_channels=1, d_model=32, n_layers=4, n_heads=4, n_modes=12,
            regressor_width=20, regressor_layers=2, latent_resolution=latent, conv_blocks=3),
        "FNO": FNO(n_modes=(8, 8), hidden_channels=24, in_channels=1, out_channels=1, projection_channel_ratio=2),
    }


def run_part(train, tests: dict, latent: int, epochs: int, seed: int) -> dict:
    """Train each model, then evaluate on every test set (small batches: at 4x resolution MANO's
    physical windows hold 16x more cells each)."""
    out = {}
    for name, model in models(latent).items():
        torch.manual_seed(seed)
        xn, yn = fit_normalizers(train)
        trainer = Trainer(model=model, train_data=train, test_data={}, x_normalizer=xn, y_normalizer=yn,
                          spatial_dims=2, epochs=epochs, seed=seed, progress=False, log=lambda m: None, **RECIPE)
        t0 = time.perf_counter()
        trainer.fit()
        seconds = time.perf_counter() - t0
        errors = {k: evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=2, batch_size=2)["rel_l2"]
                  for k, ds in tests.items()}
        out[name] = {"parameters": count_parameters(model), "train_seconds": seconds, "rel_l2": errors}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--n-test", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--epochs-real", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn").expanduser())
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()

    real = DataConfig(format="neuralop_pt", train=str(args.data / "darcy_train_16.pt"),
                      test=str(args.data / "darcy_test_16.pt"))
    train, tests = build_datasets(real)
    part_a = run_part(train, tests, 16, args.epochs_real, args.seed)

    gen = DataConfig(format="darcy_solver", train_resolution=64, test_resolutions=[64, 128, 256],
                     n_train=args.n_train, n_test=args.n_test, cache_dir=str(args.cache), seed=args.seed)
    train, tests = build_datasets(gen, progress=True)
    part_b = run_part(train, tests, 64, args.epochs, args.seed)

    summary = {"benchmark": "darcy_mano", "date": datetime.date.today().isoformat(),
               "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
               "torch": torch.__version__, "recipe": RECIPE, "mano_config": {"16": mano_params(16), "64": mano_params(64)},
               "epochs_real": args.epochs_real, "epochs_generated": args.epochs,
               "n_train_generated": args.n_train, "n_test_generated": args.n_test, "seed": args.seed,
               "real_16": part_a, "generated_64": part_b}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "darcy_mano.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"Darcy, one seed ({args.seed}), {summary['date']}, {summary['machine']}, torch {summary['torch']}. "
             "Command: `python benchmarks/darcy_mano.py`.", "",
             f"Shared recipe: {json.dumps(RECIPE)}. MANO: `[model]` of examples/configs/darcy64_mano.toml, at 64²: "
             f"`{json.dumps(mano_params(64))}`.", "",
             f"Real neuraloperator 16×16 files, {args.epochs_real} epochs:", "",
             "| model | parameters | test rel. L2 | train seconds |", "|---|---|---|---|"]
    for name, r in part_a.items():
        lines.append(f"| {name} | {r['parameters']:,} | {r['rel_l2']['test_16x16']:.4f} | {r['train_seconds']:.0f} |")
    lines += ["", f"Built-in solver, {args.n_train} training samples at 64², {args.epochs} epochs; zero-shot at 2× and 4×:",
              "", "| model | parameters | 64² | 128² (2×) | 256² (4×) | 256² / 64² | train seconds |",
              "|---|---|---|---|---|---|---|"]
    for name, r in part_b.items():
        e = r["rel_l2"]
        lines.append(f"| {name} | {r['parameters']:,} | {e['test_64']:.4f} | {e['test_128']:.4f} | {e['test_256']:.4f} | "
                     f"{e['test_256'] / e['test_64']:.2f} | {r['train_seconds']:.0f} |")
    (args.results / "darcy_mano.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
