"""MANO against the Galerkin Transformer and FNO on Darcy flow, side by side in one run.

Part A, real data: neuraloperator's 16×16 files (``../shared/data``), 15 epochs each.
Part B, built-in solver: trained at 64×64, tested at 64 and zero-shot at 128 (2×) and 256 (4×);
every sample is solved once at 256×256 and restricted.

All three models use the same trainer and recipe (AdamW, OneCycle, relative L2 + H1, batch 8,
lr 2e-3). The "MANO" row is the operator named in ``examples/configs/darcy64_mano.toml``
(``mano_extended``, the extended variant, not the published ``mano``; the tables say which), built from
that ``[model]`` section unchanged at both training resolutions: every setting is a physical size
(windows 1/8 of the domain, key levels of fixed physical size, stencil spacing 1/64 of the domain,
a bias over displacements in window units, the head's Fourier coefficients on 64 nodes per axis), so
Part A at 16² uses the same model as Part B at 64². The Galerkin Transformer uses its latent grid at
the training resolution; FNO keeps its 8×8 modes.

Result files dated before 2026-12-02 (their tables carry no operator name) come from the earlier
variant: operator ``mano`` with the extended options and four settings restated for each training
resolution (``lift_spacing = 1/n``, ``rel_pos_bias`` and ``coarse_cells`` = window cells at ``n``,
``head_grid = n``), on the multipole layer of that date.

    python benchmarks/darcy_mano.py [--n-train 500] [--epochs 10] [--data ../shared/data] [--threads 1]
    python benchmarks/darcy_mano.py --lr-from benchmarks/results/darcy_lr_sweep.json

``--lr-from`` reads the per-model learning rates that ``benchmarks/darcy_lr_sweep.py`` chose on a
validation split of Part B's training samples (``chosen_lr``) and uses them in Part B; every other
recipe entry stays as above, and Part A keeps the shared lr (the sweep saw no 16² data).
``--skip-real`` leaves Part A out. ``--seed`` fixes each model's initial weights (torch is seeded
before every model is built) and the trainer's shuffling. Result files written before 2026-11-30's
third session came from unseeded initial weights (the models were built before the seed was set).

Writes benchmarks/results/darcy_mano.{json,md}, or darcy_mano_tuned_lr.{json,md} with ``--lr-from``;
``--name`` sets another stem (e.g. for a longer run that should not replace those files).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import sys
import time
from collections.abc import Callable
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


def mano_operator() -> str:
    """The operator the example config names (``mano_extended``)."""
    return load_config(MANO_CONFIG).model_name


def mano_params(resolution: int) -> dict:
    """MANO's ``[model]`` parameters from the example config. Every one is a physical size, so they are the
    same for every training ``resolution`` (kept as an argument for the callers that state it)."""
    del resolution
    return dict(load_config(MANO_CONFIG).model_params)


def models(latent: int) -> dict[str, Callable[[], torch.nn.Module]]:
    """A builder per model; :func:`run_part` seeds torch before each call, so initial weights are reproducible."""
    from neuralop.models import FNO

    return {
        "MANO": lambda: create_operator(mano_operator(), in_channels=1, out_channels=1, **mano_params(latent)),
        "Galerkin Transformer": lambda: create_operator(
            "galerkin_transformer", in_channels=1, out_channels=1, d_model=32, n_layers=4, n_heads=4, n_modes=12,
            regressor_width=20, regressor_layers=2, latent_resolution=latent, conv_blocks=3),
        "FNO": lambda: FNO(n_modes=(8, 8), hidden_channels=24, in_channels=1, out_channels=1,
                           projection_channel_ratio=2),
    }


def generated_config(n_train: int, n_test: int, cache: Path, seed: int) -> DataConfig:
    """Part B's data: built-in solver, trained at 64², tested at 64², 128² and 256² (one cache file)."""
    return DataConfig(format="darcy_solver", train_resolution=64, test_resolutions=[64, 128, 256],
                      n_train=n_train, n_test=n_test, cache_dir=str(cache), seed=seed)


def train_model(model: torch.nn.Module, train, epochs: int, seed: int, lr: float | None = None):
    """Train ``model`` on ``train`` with :data:`RECIPE` (``lr`` replaces the recipe's when given);
    returns ``(x_normalizer, y_normalizer, train_seconds)``, normalizers fitted on ``train`` only."""
    torch.manual_seed(seed)
    xn, yn = fit_normalizers(train)
    recipe = RECIPE if lr is None else {**RECIPE, "lr": lr}
    trainer = Trainer(model=model, train_data=train, test_data={}, x_normalizer=xn, y_normalizer=yn,
                      spatial_dims=2, epochs=epochs, seed=seed, progress=False, log=lambda m: None, **recipe)
    t0 = time.perf_counter()
    trainer.fit()
    return xn, yn, time.perf_counter() - t0


def rel_l2(model: torch.nn.Module, ds, xn, yn) -> float:
    """Mean per-sample relative L2 error on ``ds`` (small batches: at 4x resolution MANO's physical
    windows hold 16x more cells each)."""
    return evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=2, batch_size=2)["rel_l2"]


def load_lrs(path: Path, names) -> dict[str, float]:
    """``{model: lr}`` from a ``darcy_lr_sweep.json`` (its ``chosen_lr``), for every model in ``names``."""
    chosen = json.loads(Path(path).read_text()).get("chosen_lr")
    if not isinstance(chosen, dict):
        raise ValueError(f"--lr-from: expected a darcy_lr_sweep.json with a 'chosen_lr' object, got {path}")
    missing = [n for n in names if n not in chosen]
    if missing:
        raise ValueError(f"--lr-from: expected a chosen lr for every model {list(names)}, "
                         f"got none for {missing} in {path}")
    return {n: float(chosen[n]) for n in names}


def run_part(train, tests: dict, latent: int, epochs: int, seed: int, lrs: dict[str, float] | None = None) -> dict:
    """Train each model (``lrs``: per-model learning rates, else the recipe's), then evaluate on
    every test set."""
    out = {}
    for name, build in models(latent).items():
        torch.manual_seed(seed)
        model = build()
        lr = None if lrs is None else lrs[name]
        xn, yn, seconds = train_model(model, train, epochs, seed, lr)
        errors = {k: rel_l2(model, ds, xn, yn) for k, ds in tests.items()}
        out[name] = {"parameters": count_parameters(model), "train_seconds": seconds, "rel_l2": errors}
        if lr is not None:
            out[name]["lr"] = lr
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
    ap.add_argument("--lr-from", type=Path, default=None,
                    help="darcy_lr_sweep.json: per-model lr for Part B (writes darcy_mano_tuned_lr.{json,md})")
    ap.add_argument("--skip-real", action="store_true", help="leave out Part A (the real 16x16 files)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--name", default=None,
                    help="stem of the result files (default darcy_mano, or darcy_mano_tuned_lr with --lr-from)")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    names = tuple(models(64))
    lrs = load_lrs(args.lr_from, names) if args.lr_from is not None else None

    part_a = {}
    if not args.skip_real:
        real = DataConfig(format="neuralop_pt", train=str(args.data / "darcy_train_16.pt"),
                          test=str(args.data / "darcy_test_16.pt"))
        train, tests = build_datasets(real)
        part_a = run_part(train, tests, 16, args.epochs_real, args.seed)

    gen = generated_config(args.n_train, args.n_test, args.cache, args.seed)
    train, tests = build_datasets(gen, progress=True)
    part_b = run_part(train, tests, 64, args.epochs, args.seed, lrs)

    summary = {"benchmark": "darcy_mano", "date": datetime.date.today().isoformat(),
               "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
               "torch": torch.__version__, "recipe": RECIPE, "mano_operator": mano_operator(), "mano_config": mano_params(64),
               "epochs_real": args.epochs_real, "epochs_generated": args.epochs,
               "n_train_generated": args.n_train, "n_test_generated": args.n_test, "seed": args.seed,
               "real_16": part_a, "generated_64": part_b}
    stem, recipe_line = "darcy_mano", f"Shared recipe: {json.dumps(RECIPE)}."
    command = shlex.join(["python", "benchmarks/darcy_mano.py", *sys.argv[1:]])
    if args.skip_real:
        del summary["real_16"], summary["epochs_real"]
    if lrs is not None:
        stem = "darcy_mano_tuned_lr"
        summary["benchmark"] = stem
        summary["lr_from"] = str(args.lr_from)
        summary["lrs_generated"] = lrs
        recipe_line = (f"Recipe: {json.dumps(RECIPE)}, except the lr of the built-in-solver part, per model from "
                       f"`{args.lr_from}` (argmin of validation rel. L2, last 80 of the training samples held out, "
                       "see benchmarks/darcy_lr_sweep.py): "
                       + ", ".join(f"{n} {lr:g}" for n, lr in lrs.items()) + ". Real 16×16 part: the recipe's lr.")
    if args.name is not None:
        stem = summary["benchmark"] = args.name
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{stem}.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [f"Darcy, one seed ({args.seed}), {summary['date']}, {summary['machine']}, torch {summary['torch']}. "
             f"Command: `{command}`.", "",
             f"{recipe_line} MANO: operator `{mano_operator()}` (the extended variant; the published one is "
             f"`mano`), `[model]` of examples/configs/darcy64_mano.toml at every training resolution: "
             f"`{json.dumps(mano_params(64))}`.", ""]
    if part_a:
        lines += [f"Real neuraloperator 16×16 files, {args.epochs_real} epochs:", "",
                  "| model | parameters | test rel. L2 | train seconds |", "|---|---|---|---|"]
        for name, r in part_a.items():
            lines.append(f"| {name} | {r['parameters']:,} | {r['rel_l2']['test_16x16']:.4f} | {r['train_seconds']:.0f} |")
        lines.append("")
    lr_col = lrs is not None
    lines += [f"Built-in solver, {args.n_train} training samples at 64², {args.epochs} epochs; zero-shot at 2× and 4×:",
              "", "| model | parameters |" + (" lr |" if lr_col else "")
              + " 64² | 128² (2×) | 256² (4×) | 256² / 64² | train seconds |",
              "|---|---|" + ("---|" if lr_col else "") + "---|---|---|---|---|"]
    for name, r in part_b.items():
        e = r["rel_l2"]
        lines.append(f"| {name} | {r['parameters']:,} |" + (f" {r['lr']:g} |" if lr_col else "")
                     + f" {e['test_64']:.4f} | {e['test_128']:.4f} | {e['test_256']:.4f} | "
                     f"{e['test_256'] / e['test_64']:.2f} | {r['train_seconds']:.0f} |")
    (args.results / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
