"""Shallow-water equations on the sphere: spherical transformer vs planar transformer vs SFNO.

Task: learn the one-hour map ``u(t) -> u(t + 1 h)`` of the rotating shallow-water equations
(:mod:`sciattn.pde_data.shallow_water`, state ``u = (φ, ζ, δ)`` on a 32×64 equiangular grid with poles),
then roll the learned map out autoregressively for 10 steps.

Models, all predicting the increment (``u_next = u + net(u)``, normalised fields):

* spherical transformer (:class:`~sciattn.operators.spherical_transformer.SphericalTransformer`):
  area-weighted quadrature attention on geodesic discs (neighbourhood) or the whole sphere (global);
* planar transformer (:class:`~sciattn.operators.spherical_transformer.PlanarTransformer`): the same
  blocks and parameter count on the grid seen as a flat image (uniform key weights, Euclidean discs);
* SFNO (``neuralop.models.SFNO``, spherical harmonic convolutions from torch-harmonics; needs the
  ``sphere`` extra, otherwise the row is skipped with a note), sized to within 10% of the transformers.

Protocol (equal budget): fields normalised per channel, ``(u − μ_c)/σ_c``, with area-weighted statistics
of the training pairs (:func:`~sciattn.pde_data.shallow_water.area_weighted_stats`); every model sees
the same pairs in the same order, with the same optimizer (Adam, cosine decay, gradient clipping),
epochs and batch size, and is trained on the area-weighted relative L2 of the normalised fields
(:func:`~sciattn.train.area_metrics.area_weighted_l2`, mean over channels). Metrics: one-step
area-weighted relative L2 and L1 on held-out pairs (per variable), and 10-step rollouts on held-out
trajectories (:func:`~sciattn.train.area_metrics.rollout_errors`, bound 1 = "never worse than
predicting zero"). Persistence (``u_next = u``) is reported as a reference.

Attention path: the neighbourhood layers' CSR attention is evaluated as dense scaled-dot-product
attention with the additive mask ``log q_j`` on the disc and ``−∞`` off it (the dense form given in
:mod:`sciattn.neighborhood.functional`); it is the same function (checked against the package path at
start-up), ~2× cheaper on CPU at these sizes. ``--attention-path sparse`` uses the package path.

    python benchmarks/swe_sphere.py [--quick] [--epochs 8] [--n-train 512] [--variants neighborhood global]

Run with torch-harmonics importable for the SFNO row (``pip install sciattn[sphere]`` or
``PYTHONPATH=<torch_harmonics dir>``). Data are cached under ``--cache`` (default
``~/.cache/sciattn``, outside the repository). Writes ``benchmarks/results/swe_sphere.{json,md}``
(``--quick``: prints only, unless ``--results`` is given).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sciattn.operators.spherical_transformer import PlanarTransformer, SphericalTransformer
from sciattn.pde_data.shallow_water import area_weighted_stats, load_or_generate_shallow_water
from sciattn.spherical.functional import area_weights
from sciattn.train.area_metrics import area_weighted_l1, area_weighted_l2, rollout_errors
from sciattn.train.run import count_parameters

ROOT = Path(__file__).resolve().parents[1]
VARS = ("phi", "vorticity", "divergence")
DATA = dict(nlat=32, nlon=64, grid="equiangular", dt=600.0, n_steps_between=6)  # Δt = 1 h
SFNO_NOTE = "needs torch-harmonics (the `sphere` extra: pip install sciattn[sphere])"


# ----------------------------------------------------------------------------------------- models


class Residual(nn.Module):
    """``u + net(u)``: increment prediction for a model without a built-in residual."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x):
        return x + self.net(x)


def _dense_bias(mod: nn.Module) -> torch.Tensor:
    """``(Nq, Nk)`` additive mask of a CSR attention layer: ``log q_j`` (spherical) or 0 (planar) on the
    neighbourhood, ``−∞`` elsewhere."""
    nq = mod.row_offsets.numel() - 1
    nk = mod.in_shape[0] * mod.in_shape[1]
    rows = torch.repeat_interleave(torch.arange(nq), mod.row_offsets.diff())
    log_w = torch.log(area_weights(mod.grid_in)) if hasattr(mod, "grid_in") else torch.zeros(nk, dtype=torch.float64)
    bias = torch.full((nq, nk), -math.inf, dtype=torch.float64)
    bias[rows, mod.col_indices] = log_w[mod.col_indices]
    return bias


def _dense_attend(self, q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=self.dense_bias.to(q.dtype), scale=self.scale)


def use_dense_masked_attention(model: nn.Module) -> float:
    """Switch every CSR attention layer of ``model`` to the dense masked form; return the max abs
    difference of the model output before/after on a random input (float64)."""
    x = torch.randn(2, model.in_channels, *model.shape, dtype=torch.float64)
    model.double()
    with torch.no_grad():
        before = model(x)
        for mod in model.modules():
            if hasattr(mod, "row_offsets") and hasattr(mod, "col_indices"):
                mod.register_buffer("dense_bias", _dense_bias(mod), persistent=False)
                mod._attend = types.MethodType(_dense_attend, mod)
        diff = float((model(x) - before).abs().max())
    model.float()
    return diff


def make_sfno(target_params: int):
    """SFNO at ~``target_params`` parameters: neuraloperator's, else torch-harmonics' example model.
    Returns ``(model, description)`` or ``(None, reason)``."""
    try:
        import torch_harmonics  # noqa: F401
    except ImportError:
        return None, f"skipped: torch_harmonics is not importable; the SFNO row {SFNO_NOTE}"
    errors = []
    try:
        from neuralop.models import SFNO

        # neuralop's n_modes = (lmax, 2·mmax); (16, 32) is the full triangular truncation of a 32-row
        # equiangular grid. hidden_channels=18 gives 45,993 parameters.
        net = SFNO(n_modes=(16, 32), in_channels=3, out_channels=3, hidden_channels=18, n_layers=4)
        with torch.no_grad():
            net(torch.zeros(1, 3, DATA["nlat"], DATA["nlon"]))
        return Residual(net), ("neuralop.models.SFNO(n_modes=(16, 32), hidden_channels=18, n_layers=4), "
                               "equiangular SHT, lmax = mmax = 16, + input residual")
    except Exception as exc:  # fall back to torch-harmonics' own example model
        errors.append(f"neuralop SFNO failed: {exc!r}")
    try:
        from torch_harmonics.examples.models import SphericalFourierNeuralOperator as THSFNO

        def build(e):
            return THSFNO(img_size=(DATA["nlat"], DATA["nlon"]), grid="equiangular", scale_factor=1, in_chans=3,
                          out_chans=3, embed_dim=e, num_layers=4, residual_prediction=True)
        e = min(range(8, 65, 2), key=lambda e: abs(count_parameters(build(e)) - target_params))
        return build(e), f"torch_harmonics.examples.models.SphericalFourierNeuralOperator(embed_dim={e}, num_layers=4)"
    except Exception as exc:
        errors.append(f"torch-harmonics SFNO failed: {exc!r}")
    return None, "skipped: " + "; ".join(errors)


def build_models(args) -> tuple[dict, dict]:
    """``{name: model}`` and ``{name: note}``."""
    common = dict(in_channels=3, out_channels=3, nlat=DATA["nlat"], nlon=DATA["nlon"], embed_dim=args.embed_dim,
                  n_layers=args.layers, n_heads=args.heads, mlp_ratio=2, residual_prediction=True)
    models, notes = {}, {}
    for variant in args.variants:
        tag = "nbhd" if variant == "neighborhood" else "global"
        torch.manual_seed(args.seed)
        sph = SphericalTransformer(grid=DATA["grid"], attention=variant, **common)
        torch.manual_seed(args.seed)
        pla = PlanarTransformer(attention=variant, **common)
        models[f"spherical-{tag}"], models[f"planar-{tag}"] = sph, pla
        notes[f"spherical-{tag}"] = (f"{variant} attention, internal grid {sph.inner_shape} legendre-gauss, "
                                     f"{sph.pos_embed} positional embedding"
                                     + (f", θ_c = {sph.theta_cutoff:.4f} rad" if variant == "neighborhood" else ""))
        notes[f"planar-{tag}"] = (f"{variant} attention, internal image {pla.inner_shape}, {pla.pos_embed} positional "
                                  "embedding"
                                  + (f", disc radius {pla.window_radius:.3f} px" if variant == "neighborhood" else ""))
    if not args.no_sfno:
        target = count_parameters(next(iter(models.values())))
        torch.manual_seed(args.seed)
        sfno, note = make_sfno(target)
        notes["SFNO"] = note
        if sfno is not None:
            models["SFNO"] = sfno
    return models, notes


# ------------------------------------------------------------------------------------ train / eval


def loss_fn(pred, target, w):
    return area_weighted_l2(pred, target, w, relative=True, reduction="mean")


def train(model, x, y, w, args) -> dict:
    """Adam + per-step cosine decay + gradient clipping; the same shuffles for every model."""
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps_per_epoch = math.ceil(x.shape[0] / args.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * steps_per_epoch)
    gen = torch.Generator().manual_seed(args.seed)
    history = []
    t0 = time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        perm, total = torch.randperm(x.shape[0], generator=gen), 0.0
        for s in range(0, x.shape[0], args.batch_size):
            idx = perm[s:s + args.batch_size]
            loss = loss_fn(model(x[idx]), y[idx], w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            opt.step()
            sched.step()
            total += float(loss.detach()) * idx.numel()
        history.append(total / x.shape[0])
        print(f"    epoch {epoch + 1}/{args.epochs}: train loss {history[-1]:.4f} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    model.eval()
    return {"train_seconds": time.perf_counter() - t0, "train_loss": history}


@torch.no_grad()
def one_step(step_fn, x, y, w, batch: int = 16) -> dict:
    l2, l1 = [], []
    for s in range(0, x.shape[0], batch):
        p = step_fn(x[s:s + batch])
        l2.append(area_weighted_l2(p, y[s:s + batch], w, reduction="none"))
        l1.append(area_weighted_l1(p, y[s:s + batch], w, reduction="none"))
    l2, l1 = torch.cat(l2).mean(0), torch.cat(l1).mean(0)
    return {"rel_l2": float(l2.mean()), "rel_l1": float(l1.mean()),
            "rel_l2_per_var": dict(zip(VARS, map(float, l2))), "rel_l1_per_var": dict(zip(VARS, map(float, l1)))}


def _rms(u, w):
    """Area-weighted rms per sample and channel ``(B, C)``."""
    return torch.sqrt((u * u * w).sum((-2, -1)) / w.sum())


def rollout(step_fn, traj, w) -> dict:
    """:func:`rollout_errors` plus the amplitude ratio rms(prediction)/rms(truth) per step (mean over
    samples and channels): > 1 growing, < 1 damped; a blow-up shows as a ratio far above 1."""
    states = []

    def record(u):
        out = step_fn(u)
        states.append(_rms(out, w))
        return out

    r = rollout_errors(record, traj[:, 0], traj[:, 1:], w, metric="l2", relative=True)
    ratio = [float((p / _rms(traj[:, k + 1], w)).mean()) for k, p in enumerate(states)]
    return {"rel_l2_per_step": [float(e) for e in r.mean_errors], "amplitude_ratio_per_step": ratio,
            "rel_l2_per_step_per_var": {v: [float(e) for e in r.errors[:, i]] for i, v in enumerate(VARS)},
            "stable": r.stable, "first_failure": r.first_failure, "bound": r.bound}


# ------------------------------------------------------------------------------------------ main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (< 2 min): tiny data, 1 epoch")
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--n-test", type=int, default=128)
    ap.add_argument("--n-traj", type=int, default=16)
    ap.add_argument("--rollout-steps", type=int, default=10)
    ap.add_argument("--spinup", type=int, default=12, help="hours integrated from the random state before t=0")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--embed-dim", type=int, default=32)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--variants", nargs="+", default=["neighborhood", "global"], choices=["neighborhood", "global"])
    ap.add_argument("--no-sfno", action="store_true")
    ap.add_argument("--attention-path", default="dense", choices=["dense", "sparse"])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: fastest on shared cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=Path("~/.cache/sciattn").expanduser())
    ap.add_argument("--results", type=Path, default=None, help="default benchmarks/results (none with --quick)")
    ap.add_argument("--report-from", type=Path, default=None,
                    help="rewrite the Markdown (and the targets) of an existing swe_sphere.json, without training")
    args = ap.parse_args()
    if args.quick:
        args.n_train, args.n_test, args.n_traj, args.epochs = 32, 16, 2, 1
        args.variants = ["neighborhood"]
    elif args.results is None:
        args.results = ROOT / "benchmarks" / "results"
    return args


def main() -> None:
    args = parse_args()
    if args.report_from is not None:
        summary = json.loads(args.report_from.read_text())
        summary["targets"] = evaluate_targets(summary["results"])
        lines = markdown(summary, args)
        args.report_from.write_text(json.dumps(summary, indent=2) + "\n")
        args.report_from.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", module="neuralop")
    t_start = time.perf_counter()

    t0 = time.perf_counter()
    data = load_or_generate_shallow_water(args.cache, args.n_train + args.n_test, seed=args.seed, n_traj=args.n_traj,
                                          traj_len=args.rollout_steps, spinup=args.spinup, **DATA)
    data_seconds = time.perf_counter() - t0
    n = args.n_train
    mean, std = area_weighted_stats(np.concatenate([data["x"][:n], data["y"][:n]]), data["weights"])
    m_t, s_t = (torch.as_tensor(a, dtype=torch.float32)[:, None, None] for a in (mean, std))

    def norm(a):
        return (torch.as_tensor(a) - m_t) / s_t

    x, y = norm(data["x"]), norm(data["y"])
    traj = norm(data["trajectories"])
    w = torch.as_tensor(data["weights"], dtype=torch.float32)
    x_tr, y_tr, x_te, y_te = x[:n], y[:n], x[n:], y[n:]
    print(f"data: {n} train / {args.n_test} test pairs, {args.n_traj} trajectories, {data_seconds:.0f} s "
          f"(mean {mean}, std {std}; dataset stats: {data['mean']}, {data['std']})", flush=True)

    models, notes = build_models(args)
    dense_check = {}
    if args.attention_path == "dense":
        for name, model in models.items():
            if name != "SFNO":
                dense_check[name] = use_dense_masked_attention(model)
                if dense_check[name] > 1e-8:
                    raise RuntimeError(f"{name}: dense masked attention differs from the CSR path by {dense_check[name]}")
    results = {"persistence": {"parameters": 0, "train_seconds": 0.0, "note": "u(t+1h) = u(t)",
                               "one_step": one_step(lambda u: u, x_te, y_te, w),
                               "rollout": rollout(lambda u: u, traj, w)}}
    for name, model in models.items():
        print(f"{name}: {count_parameters(model):,} parameters ({notes[name]})", flush=True)
        torch.manual_seed(args.seed)
        fit = train(model, x_tr, y_tr, w, args)
        results[name] = {"parameters": count_parameters(model), "note": notes[name], **fit,
                         "one_step": one_step(model, x_te, y_te, w), "rollout": rollout(model, traj, w)}
        r = results[name]
        print(f"  one-step rel L2 {r['one_step']['rel_l2']:.4f}, rel L1 {r['one_step']['rel_l1']:.4f}; rollout "
              f"step 10 {r['rollout']['rel_l2_per_step'][-1]:.4f}, stable {r['rollout']['stable']}", flush=True)
    for name, note in notes.items():
        if name not in results:
            results[name] = {"skipped": note}

    targets = evaluate_targets(results)

    summary = {
        "benchmark": "swe_sphere", "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), CPU (shared with other jobs)",
        "torch": torch.__version__, "versions": _versions(), "command": "python " + " ".join(sys.argv),
        "data": {**DATA, "solver": "sciattn.pde_data.shallow_water (spectral RK4, lmax = mmax = 11)",
                 "dt_pair_seconds": DATA["dt"] * DATA["n_steps_between"], "spinup_hours": args.spinup,
                 "n_train": n, "n_test": args.n_test, "n_traj": args.n_traj, "rollout_steps": args.rollout_steps,
                 "seed": args.seed, "norm_mean": mean.tolist(), "norm_std": std.tolist(),
                 "generate_seconds": data_seconds},
        "recipe": {"optimizer": "Adam", "lr": args.lr, "schedule": "cosine to 0 over all steps",
                   "grad_clip": args.grad_clip, "epochs": args.epochs, "batch_size": args.batch_size,
                   "loss": "area-weighted relative L2 of the normalised fields, mean over (phi, vorticity, divergence)",
                   "embed_dim": args.embed_dim, "layers": args.layers, "heads": args.heads, "mlp_ratio": 2,
                   "attention_path": args.attention_path, "dense_vs_sparse_max_abs_diff": dense_check},
        "results": results, "targets": targets, "total_seconds": time.perf_counter() - t_start,
    }
    lines = markdown(summary, args)
    print("\n".join(lines))
    if args.results is not None:
        args.results.mkdir(parents=True, exist_ok=True)
        (args.results / "swe_sphere.json").write_text(json.dumps(summary, indent=2) + "\n")
        (args.results / "swe_sphere.md").write_text("\n".join(lines) + "\n")


AMPLITUDE_RANGE = (0.5, 2.0)  # rms(prediction) / rms(truth) outside this at any step counts as a blow-up (or collapse)


def evaluate_targets(results: dict) -> dict:
    """The issue's two targets for the spherical neighbourhood transformer, from ``results``.

    Stability is judged two ways: *no blow-up* (every step finite, amplitude ratio within
    ``AMPLITUDE_RANGE``), which is the target; and the stricter *skill bound* of
    :func:`rollout_errors` (relative L2 never above 1), reported beside it."""
    sph, pla = results.get("spherical-nbhd", {}), results.get("planar-nbhd", {})
    if "one_step" not in sph or "one_step" not in pla:
        return {}
    gain = 1.0 - sph["one_step"]["rel_l2"] / pla["one_step"]["rel_l2"]
    ro = sph["rollout"]
    lo, hi = AMPLITUDE_RANGE
    no_blow_up = all(math.isfinite(e) for e in ro["rel_l2_per_step"]) and all(
        lo <= a <= hi for a in ro["amplitude_ratio_per_step"])
    return {"one_step_gain_vs_planar": gain, "one_step_gain_met": gain >= 0.15,
            "equal_parameters": sph["parameters"] == pla["parameters"],
            "rollout_no_blow_up": no_blow_up, "amplitude_range": list(AMPLITUDE_RANGE),
            "rollout_within_skill_bound": ro["stable"]}


def _versions() -> dict:
    out = {}
    for mod in ("neuralop", "torch_harmonics"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as exc:
            out[mod] = f"unavailable ({type(exc).__name__})"
    return out


def markdown(s: dict, args) -> list[str]:
    d, r, rec = s["data"], s["results"], s["recipe"]
    lines = [
        f"Shallow water on the sphere, one seed ({d['seed']}), {s['date']}, {s['machine']}, torch {s['torch']}, "
        f"neuralop {s['versions']['neuralop']}, torch-harmonics {s['versions']['torch_harmonics']}. "
        f"Command: `{s['command']}` (with torch-harmonics importable; total {s['total_seconds'] / 60:.1f} min).", "",
        f"Data: {d['nlat']}×{d['nlon']} {d['grid']} grid (poles included), solver dt {d['dt']:.0f} s, pairs "
        f"Δt = {d['dt_pair_seconds'] / 3600:.0f} h, random initial states integrated {d['spinup_hours']} h first "
        f"(spin-up past the initial gravity-wave adjustment); {d['n_train']} training and {d['n_test']} held-out "
        f"pairs, {d['n_traj']} held-out trajectories (other initial states). Normalisation: per-channel "
        f"area-weighted mean/std of the training pairs.", "",
        f"Training, identical for every model: {rec['optimizer']} lr {rec['lr']:g}, {rec['schedule']}, grad clip "
        f"{rec['grad_clip']:g}, {rec['epochs']} epochs, batch {rec['batch_size']}, same shuffles; loss = "
        f"{rec['loss']}. Transformers: embed {rec['embed_dim']}, {rec['layers']} layers, {rec['heads']} head(s), "
        f"MLP ratio 2, residual prediction; SFNO wrapped as u + net(u). Errors below: area-weighted relative "
        f"errors of the normalised fields (mean over variables unless stated).", "",
        "| model | parameters | train s | one-step rel. L2 | one-step rel. L1 | L2 φ / ζ / δ | rollout L2 step 1 / 5 / 10 "
        "| stable (10 steps) | amplitude ratio step 10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in r.items():
        if "skipped" in m:
            lines.append(f"| {name} | – | – | {m['skipped']} | | | | | |")
            continue
        o, ro = m["one_step"], m["rollout"]["rel_l2_per_step"]
        per = " / ".join(f"{o['rel_l2_per_var'][v]:.4f}" for v in VARS)
        steps = " / ".join(f"{ro[k]:.4f}" for k in (0, len(ro) // 2 - 1, len(ro) - 1))
        stable = "yes" if m["rollout"]["stable"] else f"no (step {m['rollout']['first_failure'] + 1})"
        lines.append(f"| {name} | {m['parameters']:,} | {m['train_seconds']:.0f} | {o['rel_l2']:.4f} | "
                     f"{o['rel_l1']:.4f} | {per} | {steps} | {stable} | "
                     f"{m['rollout']['amplitude_ratio_per_step'][-1]:.2f} |")
    t = s["targets"]
    if t:
        lines += ["", f"Target 1 (spherical-nbhd one-step rel. L2 ≥ 15% below planar-nbhd at equal parameters): "
                  f"gain {100 * t['one_step_gain_vs_planar']:.1f}% → **{'met' if t['one_step_gain_met'] else 'not met'}**"
                  f" (equal parameters: {t['equal_parameters']}). Target 2 (spherical-nbhd 10-step rollout stays "
                  f"stable, no blow-up: every step finite, rms(prediction)/rms(truth) within "
                  f"[{t['amplitude_range'][0]:g}, {t['amplitude_range'][1]:g}]): "
                  f"**{'met' if t['rollout_no_blow_up'] else 'not met'}**; the stricter skill bound below (rel. L2 ≤ 1 "
                  f"at every step): {'met' if t['rollout_within_skill_bound'] else 'not met'}."]
    lines += ["", "Rollout rel. L2 per step (mean over variables):", "",
              "| model | " + " | ".join(str(k + 1) for k in range(d["rollout_steps"])) + " |",
              "|---|" + "---|" * d["rollout_steps"]]
    for name, m in r.items():
        if "rollout" in m:
            lines.append(f"| {name} | " + " | ".join(f"{e:.3f}" for e in m["rollout"]["rel_l2_per_step"]) + " |")
    lines += ["", "Notes:", "",
              f"- SFNO row: {r['SFNO']['note']}; it {SFNO_NOTE}." if "note" in r.get("SFNO", {}) else
              f"- SFNO row: {r.get('SFNO', {}).get('skipped', f'not run (--no-sfno); it {SFNO_NOTE}')}.",
              "- Neighbourhood attention ran as dense masked SDPA (mask log q_j on the disc, −∞ off it), checked "
              "equal to the package's CSR path in float64 at start-up; train seconds are wall time on 2 CPU cores "
              "shared with other jobs, so they are indicative only." if rec["attention_path"] == "dense" else
              "- Neighbourhood attention ran through the package's CSR path (reference backend on CPU).",
              "- Stability verdict: `rollout_errors` with bound 1 (every prediction finite and the channel-mean "
              "relative L2 never above 1, i.e. never worse than predicting the mean state). This is a skill bound, "
              "not only a blow-up test: the truth decorrelates within hours (see the persistence row), so a bounded "
              "but decorrelated prediction of the right amplitude scores about √2. The amplitude ratio "
              "rms(prediction)/rms(truth) at step 10 separates the two: a blow-up shows as a ratio far above 1.",
              "- Data regime: the package's default random states (mach 0.2, spectrum decay 1, ~63 m/s peak "
              "speed, divergent and rotational parts of equal size), a stronger, more gravity-wave-dominated flow "
              "than torch-harmonics' recipe (which the module docstring equates to mach ≈ 0.03).",
              "- One seed and a short CPU budget: differences of a few per cent are within run-to-run noise "
              "(not measured here)."]
    return lines


if __name__ == "__main__":
    main()
