"""MANO against the Galerkin Transformer and FNO on Darcy flow, side by side in one run.

Part ``real_16``, real data: neuraloperator's 16×16 files (``darcy_train_16.pt`` / ``darcy_test_16.pt`` of the
``data`` folder), ``epochs_real`` epochs each. Part ``generated_64``, built-in solver: trained at 64×64, tested at
64 and zero-shot at the ``zero_shot`` resolutions (default 128 (2×) and 256 (4×)); every sample is solved once at
the finest of them and restricted.

All models use the same trainer and recipe (:data:`RECIPE`: AdamW, OneCycle, relative L2 + H1, batch 8), with the
learning rate of each model from ``lrs`` (default 2e-3 for every model, the recipe of the committed run). The
"MANO" row is the operator named in ``examples/configs/darcy64_mano.toml`` (``mano_extended``, the extended
variant, not the published ``mano``; the rows say which), built from that ``[model]`` section unchanged at both
training resolutions: every setting is a physical size (windows 1/8 of the domain, key levels of fixed physical
size, stencil spacing 1/64 of the domain, a bias over displacements in window units, the head's Fourier
coefficients on 64 nodes per axis), so Part ``real_16`` uses the same model as Part ``generated_64``. The
Galerkin Transformer uses its latent grid at the training resolution; FNO keeps its 8×8 modes. ``seed`` fixes
each model's initial weights (torch is seeded before every model is built) and the trainer's shuffling.

    python -m benchmarks run darcy_mano [--quick] [--set parts='["generated_64"]'] [--set lrs='{"MANO": 1e-3, ...}']

One row per part and model is appended to ``benchmarks/results/darcy_mano.jsonl``; docs/benchmarks/training.md
shows the tables generated from the latest run. The committed run is of the earlier MANO variant (operator
``mano`` before 2026-12-02 with the extended options and settings restated per training resolution; its rows
carry those settings and its notes say so); it took about 40 minutes on one CPU thread and is not rerun here.
``--quick`` trains one epoch on 8 real and 4 generated samples and tests on one generated sample (a check
of the path, not the claim; about a minute of CPU, most of it MANO's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from .harness import module_benchmarks

ROOT = Path(__file__).resolve().parents[1]
RECIPE = dict(batch_size=8, lr=2e-3, weight_decay=1e-4, scheduler="onecycle", loss="l2+h1", h1_weight=1.0,
              grad_clip=1.0)
MANO_CONFIG = ROOT / "examples" / "configs" / "darcy64_mano.toml"
MODELS = ("MANO", "Galerkin Transformer", "FNO")
PARTS = {"real_16": 16, "generated_64": 64}


def mano_operator() -> str:
    """The operator the example config names (``mano_extended``)."""
    from sciattn.train.config import load_config

    return load_config(MANO_CONFIG).model_name


def mano_params() -> dict:
    """MANO's ``[model]`` parameters from the example config. Every one is a physical size, so they are the
    same for every training resolution."""
    from sciattn.train.config import load_config

    return dict(load_config(MANO_CONFIG).model_params)


def models(latent: int) -> dict[str, Callable]:
    """A builder per model; :func:`run_part` seeds torch before each call, so initial weights are reproducible."""
    from neuralop.models import FNO

    from sciattn.operators import create_operator

    return {
        "MANO": lambda: create_operator(mano_operator(), in_channels=1, out_channels=1, **mano_params()),
        "Galerkin Transformer": lambda: create_operator(
            "galerkin_transformer", in_channels=1, out_channels=1, d_model=32, n_layers=4, n_heads=4, n_modes=12,
            regressor_width=20, regressor_layers=2, latent_resolution=latent, conv_blocks=3),
        "FNO": lambda: FNO(n_modes=(8, 8), hidden_channels=24, in_channels=1, out_channels=1,
                           projection_channel_ratio=2),
    }


def generated_config(n_train: int, n_test: int, cache: Path, seed: int, zero_shot: list[int]):
    """Part ``generated_64``'s data: built-in solver, trained at 64², tested at 64² and ``zero_shot``."""
    from sciattn.train.config import DataConfig

    return DataConfig(format="darcy_solver", train_resolution=64, test_resolutions=[64, *zero_shot],
                      n_train=n_train, n_test=n_test, cache_dir=str(cache), seed=seed)


def train_model(model, train, epochs: int, seed: int, lr: float):
    """Train ``model`` on ``train`` with :data:`RECIPE` and learning rate ``lr``; returns ``(x_normalizer,
    y_normalizer, train_seconds)``, normalizers fitted on ``train`` only."""
    import torch

    from sciattn.pde_data.normalizers import fit_normalizers
    from sciattn.train.training.trainer import Trainer

    torch.manual_seed(seed)
    xn, yn = fit_normalizers(train)
    trainer = Trainer(model=model, train_data=train, test_data={}, x_normalizer=xn, y_normalizer=yn,
                      spatial_dims=2, epochs=epochs, seed=seed, progress=False, log=lambda m: None,
                      **{**RECIPE, "lr": lr})
    t0 = time.perf_counter()
    trainer.fit()
    return xn, yn, time.perf_counter() - t0


def rel_l2(model, ds, xn, yn) -> float:
    """Mean per-sample relative L2 error on ``ds`` (small batches: at 4x resolution MANO's physical
    windows hold 16x more cells each)."""
    from sciattn.train.training.trainer import evaluate_dataset

    return evaluate_dataset(model, ds, x_normalizer=xn, y_normalizer=yn, spatial_dims=2, batch_size=2)["rel_l2"]


def run_part(part: str, train, tests: dict, names: list[str], epochs: int, seed: int, lrs: dict) -> list[dict]:
    """Train each model of ``names`` with its learning rate, then evaluate on every test set (the first is the
    training resolution); one row per model."""
    import torch

    from sciattn.train.training.run import count_parameters

    latent = PARTS[part]
    builders = models(latent)
    rows = []
    for name in names:
        torch.manual_seed(seed)
        model = builders[name]()
        lr = float(lrs[name])
        xn, yn, seconds = train_model(model, train, epochs, seed, lr)
        errors = {k: rel_l2(model, ds, xn, yn) for k, ds in tests.items()}
        first, *others = errors
        rows.append({"part": part, "model": name,
                     "operator": mano_operator() if name == "MANO" else "galerkin_transformer"
                     if name == "Galerkin Transformer" else "neuralop FNO",
                     "parameters": count_parameters(model), "recipe": {**RECIPE, "lr": lr}, "epochs": epochs,
                     "n_train": len(train), "train_seconds": seconds, "rel_l2": errors[first],
                     "zero_shot": {k.rsplit("_", 1)[-1]: errors[k] for k in others} or None,
                     "mano_params": mano_params() if name == "MANO" else None})
    return rows


def _check(params: dict) -> None:
    parts = params["parts"]
    if not isinstance(parts, list) or not parts or any(p not in PARTS for p in parts):
        raise ValueError(f"parts: expected a non-empty list of {list(PARTS)}, got {parts!r}")
    names = params["models"]
    if not isinstance(names, list) or not names or any(n not in MODELS for n in names):
        raise ValueError(f"models: expected a non-empty list of {list(MODELS)}, got {names!r}")
    lrs = params["lrs"]
    if not isinstance(lrs, dict) or any(not isinstance(lrs.get(n), (int, float)) or isinstance(lrs.get(n), bool)
                                        or not lrs[n] > 0 for n in names):
        raise ValueError(f"lrs: expected a positive learning rate for every model {names}, got {lrs!r}")
    for key in ("epochs", "epochs_real", "n_train", "n_test"):
        if not isinstance(params[key], int) or isinstance(params[key], bool) or params[key] < 1:
            raise ValueError(f"{key}: expected a positive int, got {params[key]!r}")
    n = params["n_train_real"]
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 2):
        raise ValueError(f"n_train_real: expected null (every sample) or an int >= 2, got {n!r}")
    zs = params["zero_shot"]
    if not isinstance(zs, list) or any(not isinstance(r, int) or r <= 64 or r % 64 for r in zs) or zs != sorted(zs):
        raise ValueError(f"zero_shot: expected increasing multiples of 64 above 64, got {zs!r}")


SCHEMA = {"part": "str", "model": "str", "operator": "str", "parameters": "int", "recipe": "dict", "epochs": "int",
          "n_train": "int", "train_seconds": "float", "rel_l2": "float", "zero_shot": "dict?", "mano_params": "dict?"}
PARAMS = {"data": str(ROOT.parent / "shared" / "data"), "parts": list(PARTS), "models": list(MODELS),
          "lrs": dict.fromkeys(MODELS, RECIPE["lr"]), "epochs_real": 15, "n_train_real": None, "epochs": 10,
          "n_train": 400, "n_test": 50, "zero_shot": [128, 256], "seed": 0,
          "cache": "~/.cache/sciattn"}
QUICK = {"epochs_real": 1, "n_train_real": 8, "epochs": 1, "n_train": 4, "n_test": 1}


def run(params: dict) -> list[dict]:
    from sciattn.train.config import DataConfig
    from sciattn.train.datasets.data import build_datasets

    _check(params)
    rows = []
    if "real_16" in params["parts"]:
        data = Path(params["data"])
        if not (data / "darcy_train_16.pt").is_file() or not (data / "darcy_test_16.pt").is_file():
            raise FileNotFoundError(f"data: expected a folder holding darcy_train_16.pt and darcy_test_16.pt "
                                    f"(or parts without 'real_16'), got {str(data)!r}")
        real = DataConfig(format="neuralop_pt", train=str(data / "darcy_train_16.pt"),
                          test=str(data / "darcy_test_16.pt"), n_train=params["n_train_real"])
        train, tests = build_datasets(real)
        rows += run_part("real_16", train, tests, params["models"], params["epochs_real"], params["seed"],
                         params["lrs"])
    if "generated_64" in params["parts"]:
        gen = generated_config(params["n_train"], params["n_test"], Path(params["cache"]).expanduser(),
                               params["seed"], params["zero_shot"])
        train, tests = build_datasets(gen)
        rows += run_part("generated_64", train, tests, params["models"], params["epochs"], params["seed"],
                         params["lrs"])
    return rows


def table(records: list[dict]) -> str:
    """One table per part: parameters, errors (and zero-shot ratio), train seconds."""
    rows = [r["row"] for r in records]
    lines: list[str] = []
    for part, res in PARTS.items():
        sel = [r for r in rows if r["part"] == part]
        if not sel:
            continue
        lr_col = len({r["recipe"]["lr"] for r in sel}) > 1
        zs = list(sel[0]["zero_shot"] or {})
        if lines:
            lines.append("")
        where = ("Real neuraloperator 16×16 files" if part == "real_16" else
                 f"Built-in solver, {sel[0]['n_train']} training samples at 64²")
        extra = f"; zero-shot at {' and '.join(f'{int(z) // res}×' for z in zs)}" if zs else ""
        lines += [f"{where}, {sel[0]['epochs']} epochs{extra}:", ""]
        head = (["model", "parameters"] + (["lr"] if lr_col else []) + [f"{res}²" if zs else "test rel. L2"]
                + [f"{z}² ({int(z) // res}×)" for z in zs] + ([f"{zs[-1]}² / {res}²"] if zs else [])
                + ["train seconds"])
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in sel:
            cells = [r["model"], f"{r['parameters']:,}"] + ([f"{r['recipe']['lr']:g}"] if lr_col else [])
            cells += [f"{r['rel_l2']:.4f}"] + [f"{r['zero_shot'][z]:.4f}" for z in zs]
            cells += [f"{r['zero_shot'][zs[-1]] / r['rel_l2']:.2f}"] if zs else []
            cells += [f"{r['train_seconds']:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    p = records[0]["params"]
    recipe = {k: v for k, v in rows[0]["recipe"].items() if k != "lr"}
    lrs = {r["model"]: r["recipe"]["lr"] for r in rows}
    lr_text = (f"lr {next(iter(lrs.values())):g} for every model" if len(set(lrs.values())) == 1
               else "lr " + ", ".join(f"{m} {lr:g}" for m, lr in lrs.items()))
    out = [f"One seed ({p['seed']}). Shared recipe: `{json.dumps(recipe)}`, {lr_text}."]
    for r in (r for r in rows if r["model"] == "MANO"):
        earlier = r["operator"] == "mano" and "lift_stencil" in (r["mano_params"] or {})
        out.append(f"MANO in `{r['part']}`: operator `{r['operator']}`"
                   + (" — the earlier extended variant (operator `mano` before 2026-12-02 with the extended options, "
                      "now `mano_extended`), not the published MANO" if earlier else "")
                   + f", `[model]` `{json.dumps(r['mano_params'])}`.")
    return "\n\n".join(out)


BENCHMARKS = module_benchmarks(globals(), packages=("neuraloperator",),
    description="MANO, Galerkin Transformer and FNO with the same trainer and recipe on neuraloperator's 16×16 "
                "Darcy files and on built-in solver data at 64² with zero-shot 128² and 256²;",
    claim="errors side by side and the zero-shot ratio 256² / 64² (docs/benchmarks/training.md; the committed "
          "MANO rows are of the earlier extended variant)",
)
