"""Zero-shot resolution transfer of one trained extended MANO under its discretisation options (same weights).

The model is the operator ``examples/configs/darcy64_mano.toml`` names (``mano_extended``, the extended
variant; the published architecture is ``mano``). Result files dated before 2026-12-02 (their header names no
operator) were produced by the earlier variant: operator ``mano`` with the extended options, on the multipole
layer of that date. The three variants are the multipole layer's input pyramid (``pyramid="input"``, its
earlier, resolution-dependent levels), whose two fraction modes this script compares; the layer's default
physical pyramid is measured by ``benchmarks/multipole_scaling.py`` and ``benchmarks/mano_fidelity.py``.
MANO is trained once at 64² on the built-in Darcy data of ``benchmarks/darcy_mano.py`` (Part B:
400 training samples, its config ``examples/configs/darcy64_mano.toml``, the darcy_mano recipe),
then evaluated on the 50 test samples at 64², 128² and 256² three times, with the same weights:

* ``cells`` (the input pyramid's fraction default): every coarse level keeps the input level's cells per window, so at
  256² level 1 is a 128² grid of 2×2 means (at 64²: a 32² grid);
* ``physical`` (``coarse_cells`` = the window in cells at 64², i.e. 8): the coarse levels keep
  the grids they had at 64² (level 1 is a 32² grid of 8×8 means at 256²), so only the finest
  level depends on the input resolution (see ``sciattn.multipole.MultipoleAttention``);
* ``physical + head grid``: also ``head_grid=64``, the spectral head computes its Fourier
  coefficients from the latent field sampled on the 64² nodes (see ``operators/mano_extended.py``).

At 64² all three are the same computation (checked here: equal test errors), so any difference
at 128² and 256² is the discretisation alone. For each variant the script also measures where the
outputs drift: on the first few test inputs it records the lift, every block and the head at 64²
and at the finer grids, and reports ``|h_fine − h_64| / |h_64|`` at the shared 64² nodes, stage by
stage (0 for an exactly consistent stage).

    python benchmarks/mano_pyramid_zero_shot.py [--epochs 10] [--lr 0.004] [--threads 1]
                                                [--save /tmp/mano64.pt] [--name NAME]

``--param KEY=VALUE`` (repeatable; VALUE read as JSON) overrides one ``[model]`` entry of the
config, e.g. ``--param rel_pos_bias=4`` for an ablation. ``--lr`` defaults to MANO's chosen rate in ``benchmarks/results/darcy_lr_sweep.json``. ``--save``
keeps the trained weights (and reuses them when the file exists: evaluation only). Writes
benchmarks/results/NAME.{json,md} (default ``mano_pyramid_zero_shot``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from darcy_mano import (  # noqa: E402
    RECIPE,
    generated_config,
    load_lrs,
    mano_operator,
    mano_params,
    rel_l2,
    train_model,
)

from sciattn.operators import create_operator  # noqa: E402
from sciattn.pde_data.normalizers import fit_normalizers  # noqa: E402
from sciattn.train.data import build_datasets  # noqa: E402
from sciattn.train.run import count_parameters  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN_RESOLUTION = 64


def window_cells(params: dict, resolution: int) -> int:
    """Cells per axis of the physical window (``window_fraction``) on a ``resolution`` grid."""
    return max(1, round(params["window_fraction"] * resolution))


def parse_params(items: list[str]) -> dict:
    """``["key=json", ...]`` -> ``{key: value}`` (JSON values; a bare word is kept as a string)."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param: expected KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


VARIANTS = ("cells", "physical", "physical + head grid")


def build(variant: str, overrides: dict | None = None) -> torch.nn.Module:
    """MANO from the example config (``overrides`` replace entries) under one of :data:`VARIANTS`."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    params = {**mano_params(TRAIN_RESOLUTION), **(overrides or {})}
    params["coarse_cells"] = params["head_grid"] = None  # not the operator's defaults (8 and 64): set per variant
    params["pyramid"] = "input"  # the layer's levels pooled from the input grid, whose two modes are compared here
    if variant != "cells":
        params["coarse_cells"] = window_cells(params, TRAIN_RESOLUTION)
    if variant == "physical + head grid":
        params["head_grid"] = TRAIN_RESOLUTION
    return create_operator(mano_operator(), in_channels=1, out_channels=1, **params)


def stage_drift(model: torch.nn.Module, tests: dict, xn, resolutions: list[int], n: int) -> dict:
    """``{stage: {res: mean relative difference}}``: the outputs of the lift, of every block and of
    the head at resolution ``res`` sampled at the 64² nodes, against the same stage at 64² (first
    ``n`` test inputs)."""
    stages = [("lift", model.lift)] + [(f"block {i + 1}", b) for i, b in enumerate(model.blocks)] + [("head", model.proj)]
    seen: dict[str, list[torch.Tensor]] = {name: [] for name, _ in stages}
    hooks = [mod.register_forward_hook(lambda _m, _i, out, name=name: seen[name].append(out.detach()))
             for name, mod in stages]
    try:
        with torch.no_grad():
            for r in resolutions:
                model(xn.encode(tests[f"test_{r}"].x[:n]))
    finally:
        for h in hooks:
            h.remove()
    out = {}
    for name, outs in seen.items():
        base = outs[0]
        out[name] = {}
        for r, h in zip(resolutions[1:], outs[1:]):
            step = r // resolutions[0]
            diff = (h[..., ::step, ::step] - base).flatten(1).norm(dim=1) / base.flatten(1).norm(dim=1)
            out[name][str(r)] = diff.mean().item()
    return out


def markdown(summary: dict) -> str:
    res = summary["resolutions"]
    lines = [f"MANO (operator `{summary.get('operator', mano_operator())}`) zero-shot under its discretisation options, one seed ({summary['seed']}), {summary['date']}, "
             f"{summary['machine']}, torch {summary['torch']}. Command: `{summary['command']}`.", "",
             f"One model ({summary['parameters']:,} parameters, `examples/configs/darcy64_mano.toml`"
             + (f" with {json.dumps(summary['overrides'])}" if summary.get("overrides") else "")
             + "), trained once at "
             f"64² on {summary['n_train']} built-in-solver samples for {summary['epochs']} epochs (lr {summary['lr']:g}, "
             f"otherwise the darcy_mano recipe; {summary['train_seconds']:.0f} s), evaluated on {summary['n_test']} "
             "test samples with the same weights under each discretisation. Test relative L2:", "",
             "| discretisation | " + " | ".join(f"{r}²" for r in res) + f" | {res[-1]}² / {res[0]}² |",
             "|---|" + "---|" * (len(res) + 1)]
    for name, errs in summary["rel_l2"].items():
        cells = [f"{errs[str(r)]:.4f}" for r in res]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {errs[str(res[-1])] / errs[str(res[0])]:.2f} |")
    drift = summary.get("stage_drift")
    if drift:
        fine = [str(r) for r in res[1:]]
        lines += ["", f"Drift at the shared 64² nodes, |h_n − h_64| / |h_64| (first {summary['drift_samples']} test inputs), "
                  "stage by stage; columns: variant at n:", "",
                  "| stage | " + " | ".join(f"{v} at {r}²" for v in drift for r in fine) + " |",
                  "|---|" + "---|" * (len(drift) * len(fine))]
        stages = list(next(iter(drift.values())))
        for st in stages:
            lines.append(f"| {st} | " + " | ".join(f"{drift[v][st][r]:.4f}" for v in drift for r in fine) + " |")
    legend = {"cells": "coarse levels keep the input level's cells per window (the input pyramid's default)",
              "physical": "`coarse_cells=8`, the coarse levels keep their 64² grids at every input resolution",
              "physical + head grid": "also `head_grid=64`, the spectral head's Fourier coefficients from the latent "
                                      "field at the 64² nodes"}
    lines += ["", "; ".join(f"`{v}`: {legend[v]}" for v in summary["rel_l2"]) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=None, help="default: MANO's chosen lr in darcy_lr_sweep.json")
    ap.add_argument("--n-train", type=int, default=400)
    ap.add_argument("--n-test", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn").expanduser())
    ap.add_argument("--save", type=Path, default=None, help="keep (or reuse) the trained weights here")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--name", default="mano_pyramid_zero_shot")
    ap.add_argument("--drift-samples", type=int, default=6, help="test inputs for the stage-by-stage drift")
    ap.add_argument("--param", action="append", default=[], help="KEY=VALUE override of the config's [model]")
    args = ap.parse_args()
    overrides = parse_params(args.param)
    torch.set_num_threads(args.threads)
    lr = args.lr if args.lr is not None else load_lrs(ROOT / "benchmarks" / "results" / "darcy_lr_sweep.json",
                                                      ["MANO"])["MANO"]
    train, tests = build_datasets(generated_config(args.n_train, args.n_test, args.cache, args.seed), progress=True)
    torch.manual_seed(args.seed)
    model = build("cells", overrides)
    if args.save is not None and args.save.is_file():
        saved = torch.load(args.save, weights_only=True)
        model.load_state_dict(saved["state_dict"])
        xn, yn = fit_normalizers(train)
        seconds = saved["train_seconds"]
    else:
        xn, yn, seconds = train_model(model, train, args.epochs, args.seed, lr)
        if args.save is not None:
            args.save.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"state_dict": model.state_dict(), "train_seconds": seconds}, args.save)
    model.eval()
    variants = {"cells": model}
    for name in VARIANTS[1:]:
        variants[name] = build(name, overrides).eval()
        variants[name].load_state_dict(model.state_dict())
    resolutions = sorted(int(k.split("_")[-1]) for k in tests)
    errors, drift = {}, {}
    for name, m in variants.items():
        drift[name] = stage_drift(m, tests, xn, resolutions, args.drift_samples)
        errors[name] = {str(r): rel_l2(m, tests[f"test_{r}"], xn, yn) for r in resolutions}
        print(name, json.dumps(errors[name]), flush=True)
    summary = {"benchmark": "mano_pyramid_zero_shot", "date": datetime.date.today().isoformat(),
               "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, CPU",
               "torch": torch.__version__, "operator": mano_operator(),
               "command": shlex.join(["python", "benchmarks/mano_pyramid_zero_shot.py", *sys.argv[1:]]),
               "seed": args.seed, "epochs": args.epochs, "overrides": overrides, "lr": lr, "recipe": {**RECIPE, "lr": lr},
               "n_train": len(train), "n_test": args.n_test, "parameters": count_parameters(model),
               "train_seconds": seconds, "resolutions": resolutions, "rel_l2": errors,
               "stage_drift": drift, "drift_samples": args.drift_samples}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary)
    (args.results / f"{args.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
