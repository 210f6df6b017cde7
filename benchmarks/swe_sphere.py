"""Shallow-water equations on the sphere: spherical transformer vs planar transformer vs SFNO.

Task: learn the one-hour map ``u(t) -> u(t + 1 h)`` of the rotating shallow-water equations
(:mod:`sciattn.pde_data.shallow_water`, state ``u = (φ, ζ, δ)`` on an ``nlat x nlon`` equiangular grid with
poles, 32×64 by default), then roll the learned map out autoregressively for ``rollout_steps`` steps.

Models, all predicting the increment (``u_next = u + net(u)``, normalised fields), one row each:

* spherical transformer (:class:`~sciattn.operators.spherical_transformer.SphericalTransformer`):
  area-weighted quadrature attention on geodesic discs (neighbourhood) or the whole sphere (global);
* planar transformer (:class:`~sciattn.operators.spherical_transformer.PlanarTransformer`): the same
  blocks and parameter count on the grid seen as a flat image (uniform key weights, Euclidean discs);
* SFNO (``neuralop.models.SFNO``, spherical harmonic convolutions from torch-harmonics; needs the
  ``sphere`` extra, otherwise its row says why it was skipped), sized to within 10% of the transformers;
* persistence (``u_next = u``) as a reference.

Protocol (equal budget): fields normalised per channel, ``(u − μ_c)/σ_c``, with area-weighted statistics
of the training pairs (:func:`~sciattn.pde_data.shallow_water.area_weighted_stats`); every model sees
the same pairs in the same order, with the same optimizer (Adam, cosine decay, gradient clipping),
epochs and batch size, and is trained on the area-weighted relative L2 of the normalised fields
(:func:`~sciattn.train.analysis.area_metrics.area_weighted_l2`, mean over channels). Metrics: one-step
area-weighted relative L2 and L1 on held-out pairs (per variable), and rollouts on held-out
trajectories (:func:`~sciattn.train.analysis.area_metrics.rollout_errors`, bound 1 = "never worse than
predicting zero") with the amplitude ratio rms(prediction)/rms(truth) per step.

The two targets of the spherical neighbourhood transformer are judged from the rows (:func:`evaluate_targets`,
in the notes under the table): one-step rel. L2 at least 15% below planar-nbhd at equal parameters, and no
blow-up over the rollout (every step finite, amplitude ratio within :data:`AMPLITUDE_RANGE`).

Attention path: the neighbourhood layers' CSR attention is evaluated as dense scaled-dot-product
attention with the additive mask ``log q_j`` on the disc and ``−∞`` off it (the dense form given in
:mod:`sciattn.neighborhood.functional`); it is the same function (checked against the package path at
start-up), ~2× cheaper on CPU at these sizes. ``attention_path="sparse"`` uses the package path.
Data are generated once and cached under ``cache`` (default ``~/.cache/sciattn``, outside the repository).

    python -m benchmarks run swe_sphere [--quick] [--set epochs=8] [--set seed=1] [--set sfno=false]
"""

from __future__ import annotations

import math
import time
import types
import warnings
from pathlib import Path
from typing import Any

from .harness import module_benchmarks

VARS = ("phi", "vorticity", "divergence")
SOLVER = dict(grid="equiangular", dt=600.0, n_steps_between=6)  # Δt = 1 h
SFNO_NOTE = "needs torch-harmonics (the `sphere` extra: pip install sciattn[sphere])"
AMPLITUDE_RANGE = (0.5, 2.0)  # rms(prediction) / rms(truth) outside this at any step counts as a blow-up (or collapse)


# ----------------------------------------------------------------------------------------- models


def residual(net):
    """``u + net(u)``: increment prediction for a model without a built-in residual."""
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, net: nn.Module):
            super().__init__()
            self.net = net

        def forward(self, x):
            return x + self.net(x)

    return Residual(net)


def _dense_bias(mod):
    """``(Nq, Nk)`` additive mask of a CSR attention layer: ``log q_j`` (spherical) or 0 (planar) on the
    neighbourhood, ``−∞`` elsewhere."""
    import torch

    from sciattn.spherical.functional import area_weights

    nq = mod.row_offsets.numel() - 1
    nk = mod.in_shape[0] * mod.in_shape[1]
    rows = torch.repeat_interleave(torch.arange(nq), mod.row_offsets.diff())
    log_w = torch.log(area_weights(mod.grid_in)) if hasattr(mod, "grid_in") else torch.zeros(nk, dtype=torch.float64)
    bias = torch.full((nq, nk), -math.inf, dtype=torch.float64)
    bias[rows, mod.col_indices] = log_w[mod.col_indices]
    return bias


def _dense_attend(self, q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=self.dense_bias.to(q.dtype), scale=self.scale)


def use_dense_masked_attention(model) -> float:
    """Switch every CSR attention layer of ``model`` to the dense masked form; return the max abs
    difference of the model output before/after on a random input (float64)."""
    import torch

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


def make_sfno(target_params: int, nlat: int, nlon: int):
    """SFNO at ~``target_params`` parameters: neuraloperator's, else torch-harmonics' example model.
    Returns ``(model, description)`` or ``(None, reason)``."""
    import torch

    from sciattn.train.training.run import count_parameters

    try:
        import torch_harmonics  # noqa: F401
    except ImportError:
        return None, f"skipped: torch_harmonics is not importable; the SFNO row {SFNO_NOTE}"
    errors = []
    try:
        from neuralop.models import SFNO

        # neuralop's n_modes = (lmax, 2·mmax); (nlat/2, nlon/2) is the full triangular truncation of the
        # equiangular grid (16, 32 at 32×64). hidden_channels=18 gives 45,993 parameters at 32×64.
        modes = (nlat // 2, nlon // 2)
        net = SFNO(n_modes=modes, in_channels=3, out_channels=3, hidden_channels=18, n_layers=4)
        with torch.no_grad():
            net(torch.zeros(1, 3, nlat, nlon))
        return residual(net), (f"neuralop.models.SFNO(n_modes={modes}, hidden_channels=18, n_layers=4), "
                               f"equiangular SHT, lmax = mmax = {modes[0]}, + input residual")
    except Exception as exc:  # fall back to torch-harmonics' own example model
        errors.append(f"neuralop SFNO failed: {exc!r}")
    try:
        from torch_harmonics.examples.models import SphericalFourierNeuralOperator as THSFNO

        def build(e):
            return THSFNO(img_size=(nlat, nlon), grid="equiangular", scale_factor=1, in_chans=3,
                          out_chans=3, embed_dim=e, num_layers=4, residual_prediction=True)
        e = min(range(8, 65, 2), key=lambda e: abs(count_parameters(build(e)) - target_params))
        return build(e), f"torch_harmonics.examples.models.SphericalFourierNeuralOperator(embed_dim={e}, num_layers=4)"
    except Exception as exc:
        errors.append(f"torch-harmonics SFNO failed: {exc!r}")
    return None, "skipped: " + "; ".join(errors)


def build_models(p) -> tuple[dict, dict]:
    """``{name: model}`` and ``{name: note}``."""
    import torch

    from sciattn.operators.spherical_transformer import PlanarTransformer, SphericalTransformer
    from sciattn.train.training.run import count_parameters

    common = dict(in_channels=3, out_channels=3, nlat=p.nlat, nlon=p.nlon, embed_dim=p.embed_dim,
                  n_layers=p.layers, n_heads=p.heads, mlp_ratio=2, residual_prediction=True)
    models, notes = {}, {}
    for variant in p.variants:
        tag = "nbhd" if variant == "neighborhood" else "global"
        torch.manual_seed(p.seed)
        sph = SphericalTransformer(grid=SOLVER["grid"], attention=variant, **common)
        torch.manual_seed(p.seed)
        pla = PlanarTransformer(attention=variant, **common)
        models[f"spherical-{tag}"], models[f"planar-{tag}"] = sph, pla
        notes[f"spherical-{tag}"] = (f"{variant} attention, internal grid {sph.inner_shape} legendre-gauss, "
                                     f"{sph.pos_embed} positional embedding"
                                     + (f", θ_c = {sph.theta_cutoff:.4f} rad" if variant == "neighborhood" else ""))
        notes[f"planar-{tag}"] = (f"{variant} attention, internal image {pla.inner_shape}, {pla.pos_embed} positional "
                                  "embedding"
                                  + (f", disc radius {pla.window_radius:.3f} px" if variant == "neighborhood" else ""))
    if p.sfno:
        target = count_parameters(next(iter(models.values())))
        torch.manual_seed(p.seed)
        sfno, note = make_sfno(target, p.nlat, p.nlon)
        notes["SFNO"] = note
        if sfno is not None:
            models["SFNO"] = sfno
    return models, notes


# ------------------------------------------------------------------------------------ train / eval


def loss_fn(pred, target, w):
    from sciattn.train.analysis.area_metrics import area_weighted_l2

    return area_weighted_l2(pred, target, w, relative=True, reduction="mean")


def train(model, x, y, w, p) -> dict:
    """Adam + per-step cosine decay + gradient clipping; the same shuffles for every model."""
    import torch
    from torch import nn

    opt = torch.optim.Adam(model.parameters(), lr=p.lr)
    steps_per_epoch = math.ceil(x.shape[0] / p.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=p.epochs * steps_per_epoch)
    gen = torch.Generator().manual_seed(p.seed)
    history = []
    t0 = time.perf_counter()
    model.train()
    for epoch in range(p.epochs):
        perm, total = torch.randperm(x.shape[0], generator=gen), 0.0
        for s in range(0, x.shape[0], p.batch_size):
            idx = perm[s:s + p.batch_size]
            loss = loss_fn(model(x[idx]), y[idx], w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), p.grad_clip)
            opt.step()
            sched.step()
            total += float(loss.detach()) * idx.numel()
        history.append(total / x.shape[0])
        print(f"    epoch {epoch + 1}/{p.epochs}: train loss {history[-1]:.4f} ({time.perf_counter() - t0:.0f} s)",
              flush=True)
    model.eval()
    return {"train_seconds": time.perf_counter() - t0, "train_loss": history}


def one_step(step_fn, x, y, w, batch: int = 16) -> dict:
    import torch

    from sciattn.train.analysis.area_metrics import area_weighted_l1, area_weighted_l2

    l2, l1 = [], []
    with torch.no_grad():
        for s in range(0, x.shape[0], batch):
            pred = step_fn(x[s:s + batch])
            l2.append(area_weighted_l2(pred, y[s:s + batch], w, reduction="none"))
            l1.append(area_weighted_l1(pred, y[s:s + batch], w, reduction="none"))
    l2, l1 = torch.cat(l2).mean(0), torch.cat(l1).mean(0)
    return {"rel_l2": float(l2.mean()), "rel_l1": float(l1.mean()),
            "rel_l2_per_var": dict(zip(VARS, map(float, l2), strict=True)),
            "rel_l1_per_var": dict(zip(VARS, map(float, l1), strict=True))}


def _rms(u, w):
    """Area-weighted rms per sample and channel ``(B, C)``."""
    import torch

    return torch.sqrt((u * u * w).sum((-2, -1)) / w.sum())


def rollout(step_fn, traj, w) -> dict:
    """:func:`rollout_errors` plus the amplitude ratio rms(prediction)/rms(truth) per step (mean over
    samples and channels): > 1 growing, < 1 damped; a blow-up shows as a ratio far above 1."""
    import torch

    from sciattn.train.analysis.area_metrics import rollout_errors

    states = []

    def record(u):
        out = step_fn(u)
        states.append(_rms(out, w))
        return out

    with torch.no_grad():
        r = rollout_errors(record, traj[:, 0], traj[:, 1:], w, metric="l2", relative=True)
    ratio = [float((s / _rms(traj[:, k + 1], w)).mean()) for k, s in enumerate(states)]
    return {"rollout_rel_l2": [float(e) for e in r.mean_errors], "amplitude_ratio": ratio,
            "rollout_rel_l2_per_var": {v: [float(e) for e in r.errors[:, i]] for i, v in enumerate(VARS)},
            "stable": bool(r.stable), "first_failure": r.first_failure, "bound": float(r.bound)}


# ---- the harness entry ---------------------------------------------------------------------------------------------

SCHEMA = {
    "model": "str", "parameters": "int?", "model_note": "str?", "skipped": "str?", "train_seconds": "float?",
    "train_loss": "list?", "rel_l2": "float?", "rel_l1": "float?", "rel_l2_per_var": "dict?",
    "rel_l1_per_var": "dict?", "rollout_rel_l2": "list?", "amplitude_ratio": "list?",
    "rollout_rel_l2_per_var": "dict?", "stable": "bool?", "first_failure": "int?", "bound": "float?",
    "dense_vs_sparse_max_abs_diff": "float?", "data": "dict", "total_seconds": "float?",
}
PARAMS = {"n_train": 512, "n_test": 128, "n_traj": 16, "rollout_steps": 10, "spinup": 12, "epochs": 8,
          "batch_size": 8, "lr": 1e-3, "grad_clip": 1.0, "embed_dim": 32, "layers": 4, "heads": 1,
          "variants": ["neighborhood", "global"], "sfno": True, "attention_path": "dense", "threads": 1, "seed": 0,
          "nlat": 32, "nlon": 64, "cache": "~/.cache/sciattn"}
QUICK = {"n_train": 8, "n_test": 4, "n_traj": 2, "rollout_steps": 3, "spinup": 2, "epochs": 1, "embed_dim": 16,
         "layers": 2, "variants": ["neighborhood"], "nlat": 16, "nlon": 32}
VARIANTS = ("neighborhood", "global")


def _check(p: dict) -> None:
    for key in ("n_train", "n_test", "n_traj", "rollout_steps", "epochs", "batch_size", "embed_dim", "layers",
                "heads", "threads", "nlat", "nlon"):
        v = p[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{key}: expected a positive integer, got {v!r}")
    for key in ("spinup", "seed"):
        if not isinstance(p[key], int) or isinstance(p[key], bool) or p[key] < 0:
            raise ValueError(f"{key}: expected a non-negative integer, got {p[key]!r}")
    for key in ("lr", "grad_clip"):
        if not isinstance(p[key], int | float) or isinstance(p[key], bool) or not p[key] > 0:
            raise ValueError(f"{key}: expected a positive number, got {p[key]!r}")
    if not isinstance(p["variants"], list) or not p["variants"] or not set(p["variants"]) <= set(VARIANTS):
        raise ValueError(f"variants: expected a non-empty list of {list(VARIANTS)}, got {p['variants']!r}")
    if p["attention_path"] not in ("dense", "sparse"):
        raise ValueError(f"attention_path: expected 'dense' or 'sparse', got {p['attention_path']!r}")
    if not isinstance(p["sfno"], bool):
        raise ValueError(f"sfno: expected true or false, got {p['sfno']!r}")
    if p["nlon"] != 2 * p["nlat"]:
        raise ValueError(f"nlon: expected 2 nlat = {2 * p['nlat']} (the solver's grid), got {p['nlon']!r}")


def run(params: dict) -> list[dict]:
    _check(params)
    import numpy as np
    import torch

    from sciattn.pde_data.shallow_water import area_weighted_stats, load_or_generate_shallow_water
    from sciattn.train.training.run import count_parameters

    p = types.SimpleNamespace(**params)
    torch.set_num_threads(p.threads)
    warnings.filterwarnings("ignore", module="neuralop")
    t_start = time.perf_counter()
    t0 = time.perf_counter()
    data = load_or_generate_shallow_water(Path(p.cache).expanduser(), p.n_train + p.n_test, seed=p.seed,
                                          n_traj=p.n_traj, traj_len=p.rollout_steps, spinup=p.spinup,
                                          nlat=p.nlat, nlon=p.nlon, **SOLVER)
    data_seconds = time.perf_counter() - t0
    n = p.n_train
    mean, std = area_weighted_stats(np.concatenate([data["x"][:n], data["y"][:n]]), data["weights"])
    m_t, s_t = (torch.as_tensor(a, dtype=torch.float32)[:, None, None] for a in (mean, std))

    def norm(a):
        return (torch.as_tensor(a) - m_t) / s_t

    x, y = norm(data["x"]), norm(data["y"])
    traj = norm(data["trajectories"])
    w = torch.as_tensor(data["weights"], dtype=torch.float32)
    x_tr, y_tr, x_te, y_te = x[:n], y[:n], x[n:], y[n:]
    print(f"data: {n} train / {p.n_test} test pairs, {p.n_traj} trajectories, {data_seconds:.0f} s", flush=True)
    data_row = {"nlat": p.nlat, "nlon": p.nlon, **SOLVER, "solver": "sciattn.pde_data.shallow_water (spectral RK4)",
                "dt_pair_seconds": SOLVER["dt"] * SOLVER["n_steps_between"], "spinup_hours": p.spinup,
                "n_train": n, "n_test": p.n_test, "n_traj": p.n_traj, "rollout_steps": p.rollout_steps,
                "seed": p.seed, "norm_mean": mean.tolist(), "norm_std": std.tolist(), "generate_seconds": data_seconds}

    models, notes = build_models(p)
    empty = dict.fromkeys(SCHEMA)
    rows = [{**empty, "model": "persistence", "parameters": 0, "train_seconds": 0.0, "model_note": "u(t+1h) = u(t)",
             **one_step(lambda u: u, x_te, y_te, w), **rollout(lambda u: u, traj, w)}]
    for name, model in models.items():
        diff = None
        if p.attention_path == "dense" and name != "SFNO":
            diff = use_dense_masked_attention(model)
            if diff > 1e-8:
                raise RuntimeError(f"{name}: dense masked attention differs from the CSR path by {diff}")
        print(f"{name}: {count_parameters(model):,} parameters ({notes[name]})", flush=True)
        torch.manual_seed(p.seed)
        fit = train(model, x_tr, y_tr, w, p)
        row = {**empty, "model": name, "parameters": count_parameters(model), "model_note": notes[name], **fit,
               **one_step(model, x_te, y_te, w), **rollout(model, traj, w), "dense_vs_sparse_max_abs_diff": diff}
        print(f"  one-step rel L2 {row['rel_l2']:.4f}, rel L1 {row['rel_l1']:.4f}; rollout last step "
              f"{row['rollout_rel_l2'][-1]:.4f}, stable {row['stable']}", flush=True)
        rows.append(row)
    for name, note in notes.items():
        if name not in models:
            rows.append({**empty, "model": name, "skipped": note})
    total = time.perf_counter() - t_start
    for row in rows:
        row["data"], row["total_seconds"] = data_row, total
    return rows


# ---- targets, table, notes -----------------------------------------------------------------------------------------


def evaluate_targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The two targets for the spherical neighbourhood transformer, from the rows (empty without the
    spherical-nbhd and planar-nbhd rows).

    Stability is judged two ways: *no blow-up* (every step finite, amplitude ratio within
    ``AMPLITUDE_RANGE``), which is the target; and the stricter *skill bound* of
    :func:`rollout_errors` (relative L2 never above 1), reported beside it."""
    by = {r["model"]: r for r in rows if r.get("rel_l2") is not None}
    sph, pla = by.get("spherical-nbhd"), by.get("planar-nbhd")
    if sph is None or pla is None:
        return {}
    gain = 1.0 - sph["rel_l2"] / pla["rel_l2"]
    lo, hi = AMPLITUDE_RANGE
    outside = [k for k, a in enumerate(sph["amplitude_ratio"]) if not lo <= a <= hi]
    finite = all(math.isfinite(e) for e in sph["rollout_rel_l2"])
    return {"one_step_gain_vs_planar": gain, "one_step_gain_met": gain >= 0.15,
            "equal_parameters": sph["parameters"] == pla["parameters"],
            "rollout_no_blow_up": finite and not outside, "blow_up_step": outside[0] + 1 if outside else None,
            "amplitude_range": list(AMPLITUDE_RANGE), "rollout_within_skill_bound": sph["stable"]}


def table(records: list[dict]) -> str:
    """The per-model table, then the rollout error per step."""
    rows = [r["row"] for r in records]
    lines = ["| model | parameters | train s | one-step rel. L2 | one-step rel. L1 | L2 φ / ζ / δ | rollout L2 step "
             "1 / 5 / 10 | stable (10 steps) | amplitude ratio step 10 |", "|---|---|---|---|---|---|---|---|---|"]
    steps = len(next((r["rollout_rel_l2"] for r in rows if r["rollout_rel_l2"]), []))
    if steps != 10:
        lines[0] = lines[0].replace("1 / 5 / 10", f"1 / {max(steps // 2, 1)} / {steps}").replace(
            "(10 steps)", f"({steps} steps)").replace("step 10 |", f"step {steps} |")
    for m in rows:
        if m["skipped"]:
            lines.append(f"| {m['model']} | – | – | {m['skipped']} | | | | | |")
            continue
        ro = m["rollout_rel_l2"]
        per = " / ".join(f"{m['rel_l2_per_var'][v]:.4f}" for v in VARS)
        at = " / ".join(f"{ro[k]:.4f}" for k in (0, max(len(ro) // 2 - 1, 0), len(ro) - 1))
        stable = "yes" if m["stable"] else f"no (step {m['first_failure'] + 1})"
        lines.append(f"| {m['model']} | {m['parameters']:,} | {m['train_seconds']:.0f} | {m['rel_l2']:.4f} | "
                     f"{m['rel_l1']:.4f} | {per} | {at} | {stable} | {m['amplitude_ratio'][-1]:.2f} |")
    lines += ["", "Rollout rel. L2 per step (mean over variables):", "",
              "| model | " + " | ".join(str(k + 1) for k in range(steps)) + " |", "|---|" + "---|" * steps]
    for m in rows:
        if m["rollout_rel_l2"]:
            lines.append(f"| {m['model']} | " + " | ".join(f"{e:.3f}" for e in m["rollout_rel_l2"]) + " |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    p, d = records[0]["params"], rows[0]["data"]
    total = rows[0]["total_seconds"]
    lines = [
        f"One seed ({d['seed']}). Data: {d['nlat']}×{d['nlon']} {d['grid']} grid (poles included), solver dt "
        f"{d['dt']:.0f} s, pairs Δt = {d['dt_pair_seconds'] / 3600:.0f} h, random initial states integrated "
        f"{d['spinup_hours']} h first (spin-up past the initial gravity-wave adjustment); {d['n_train']} training and "
        f"{d['n_test']} held-out pairs, {d['n_traj']} held-out trajectories (other initial states). Normalisation: "
        f"per-channel area-weighted mean/std of the training pairs"
        + (f"; total {total / 60:.1f} min." if total is not None else "."), "",
        f"Training, identical for every model: Adam lr {p['lr']:g}, cosine to 0 over all steps, grad clip "
        f"{p['grad_clip']:g}, {p['epochs']} epochs, batch {p['batch_size']}, same shuffles; loss = area-weighted "
        f"relative L2 of the normalised fields, mean over (phi, vorticity, divergence). Transformers: embed "
        f"{p['embed_dim']}, {p['layers']} layers, {p['heads']} head(s), MLP ratio 2, residual prediction; SFNO wrapped "
        "as u + net(u). Errors: area-weighted relative errors of the normalised fields (mean over variables unless "
        "stated).",
    ]
    t = evaluate_targets(rows)
    if t:
        lo, hi = t["amplitude_range"]
        sph = next(r for r in rows if r["model"] == "spherical-nbhd")
        blow = ("" if t["rollout_no_blow_up"] else
                f" (blow-up: amplitude ratio {sph['amplitude_ratio'][t['blow_up_step'] - 1]:.2f} at step "
                f"{t['blow_up_step']}, outside [{lo:g}, {hi:g}])" if t["blow_up_step"] else " (blow-up: a step is "
                "not finite)")
        lines += ["", f"Target 1 (spherical-nbhd one-step rel. L2 ≥ 15% below planar-nbhd at equal parameters): "
                  f"gain {100 * t['one_step_gain_vs_planar']:.1f}% → **{'met' if t['one_step_gain_met'] else 'not met'}**"
                  f" (equal parameters: {t['equal_parameters']}). Target 2 (spherical-nbhd {len(sph['amplitude_ratio'])}"
                  f"-step rollout stays stable, no blow-up: every step finite, rms(prediction)/rms(truth) within "
                  f"[{lo:g}, {hi:g}]): **{'met' if t['rollout_no_blow_up'] else 'not met'}**{blow}; the stricter skill "
                  f"bound (rel. L2 ≤ 1 at every step): {'met' if t['rollout_within_skill_bound'] else 'not met'}."]
    else:
        lines += ["", "Targets not judged: this run has no spherical-nbhd and planar-nbhd rows (`variants`)."]
    sfno = next((r for r in rows if r["model"] == "SFNO"), None)
    dense = any(r["dense_vs_sparse_max_abs_diff"] is not None for r in rows)
    lines += ["", "Notes:", "",
              (f"- SFNO row: {sfno['model_note']}; it {SFNO_NOTE}." if sfno and sfno["model_note"] else
               f"- SFNO row: {sfno['skipped']}." if sfno else f"- SFNO row: not run (`sfno=false`); it {SFNO_NOTE}."),
              "- Neighbourhood attention ran as dense masked SDPA (mask log q_j on the disc, −∞ off it), checked "
              "equal to the package's CSR path in float64 at start-up; train seconds are wall time on 2 CPU cores "
              "shared with other jobs, so they are indicative only." if dense else
              "- Neighbourhood attention ran through the package's CSR path (reference backend on CPU).",
              "- Stability verdict: `rollout_errors` with bound 1 (every prediction finite and the channel-mean "
              "relative L2 never above 1, i.e. never worse than predicting the mean state). This is a skill bound, "
              "not only a blow-up test: the truth decorrelates within hours (see the persistence row), so a bounded "
              "but decorrelated prediction of the right amplitude scores about √2. The amplitude ratio "
              "rms(prediction)/rms(truth) at the last step separates the two: a blow-up shows as a ratio far above 1.",
              "- Data regime: the package's default random states (mach 0.2, spectrum decay 1, ~63 m/s peak "
              "speed, divergent and rotational parts of equal size), a stronger, more gravity-wave-dominated flow "
              "than torch-harmonics' recipe (which the module docstring equates to mach ≈ 0.03).",
              "- One seed and a short CPU budget: differences of a few per cent are within run-to-run noise "
              "(not measured here)."]
    return "\n".join(lines)


BENCHMARKS = module_benchmarks(globals(), packages=("neuraloperator", "torch-harmonics"),
    description="Shallow water on the sphere, one-hour map and rollout: spherical transformer, planar "
                "transformer (equal parameters), SFNO and persistence;",
    claim="spherical-nbhd's one-step rel. L2 ≥ 15% below planar-nbhd's at equal parameters, and its rollout "
          "does not blow up (docs/benchmarks/sphere.md)",
)
