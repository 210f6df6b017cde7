"""Few-shot multiphysics over several seeds: pretrained CoDANO against neuraloperator's CODANO and a from-scratch FNO.

Data (:func:`sciattn.pde_data.coupled_navier_stokes.load_or_generate_coupled_navier_stokes`, cached in
``cache``), one-step pairs ``x = state(t=1) -> y = state(t=1.5)`` solved at ``fine``² and restricted to ``res``²:

* pretraining set ``"ns"``: 2-D Navier–Stokes, variables ``(u, v, w)``; ``ns_train`` train + ``ns_test`` held out;
* few-shot set ``"boussinesq"``: the same flow with an active buoyant scalar, ``(u, v, w, theta)``, buoyancy
  ``beta`` (default 0.2, the generator's; 0 makes theta a passive scalar); fine-tuning pool = the first ``pool``
  pairs (nested subsets of the sizes ``n_values``), test = the last ``test``. Initial states are drawn from
  streams seeded by (seed, system, sample), so no few-shot pair repeats a pretraining one.

Protocol, run once per seed of ``seeds`` (each seed: new initial fields for every pair, new initial weights,
new fine-tuning draws), identical for both codomain-attention models:

1. Pretrain on ``ns`` for ``pretrain_steps`` with *masked one-step prediction*: in half of the samples of every
   batch one random input variable is hidden (ours: the learned mask field, ``forward(..., masked=)``;
   neuraloperator's CODANO has no mask token, so the channel is set to zero, the ``drop_type: zeros`` of the
   original CoDA-NO repository); the target is the whole next state.
2. Add the unseen variable ``theta`` (ours: ``add_variable("theta")``; anchor:
   ``_extend_positional_encoding(["theta"])``) and fine-tune every weight on n Boussinesq pairs for
   ``finetune_steps``.
3. FNO (4 channels in, 4 out) trains from scratch on the same n pairs for the same number of steps.

Fine-tuning (all three models; never the NS pretraining) augments every batch with the symmetries of the forced
system on the grid (``augment="symmetry"``, the default): each pair is rolled by ``(s, -s)`` cells, ``s``
uniform, and with probability 1/2 turned by π about a point on ``x + y = 1/8`` (velocities and theta change
sign, the vorticity does not); both are exact (``tests/benchmarks/test_codano_fewshot.py`` solves transformed
initial states and compares). ``augment="shift"`` keeps the shifts only, ``"none"`` neither. Every fine-tuned
model is tested twice on the same pairs: its own prediction ``P(x)``, and the half-turn average
``½ (P(x) + T P(T x))``, exactly equivariant to the half-turn ``T`` for any model.

Every model predicts the increment, ``y_hat = x + f(x)`` (``residual=false``: ``y`` itself). Fields are divided
by a per-variable RMS (``u, v, w`` from the NS training set, ``theta`` from the n fine-tuning pairs), which
leaves every per-variable relative error unchanged. Loss and metric: relative L2 per sample and variable
(neuraloperator's ``LpLoss``), averaged over variables. CoDANO's size: ``ours_width``, ``ours_heads`` ×
``ours_head_channels``, ``ours_mlp_ratio``; ``theta_like="w"`` starts theta's positional encoding in both
codomain models as a copy of the vorticity's instead of a fresh draw.

    OMP_NUM_THREADS=1 python -m benchmarks run codano_fewshot [--quick] [--set seeds='[0]'] [--set augment=shift]

About 25 minutes per seed on one CPU core (the committed rows: one torch thread). Rows (one per seed, model and
stage: NS pretraining, zero-shot, each fine-tuning size, and the persistence baseline ``y = x``) are appended to
``benchmarks/results/codano_fewshot.jsonl``; the table (per seed and mean ± standard deviation over seeds, of
both metrics) and the target verdict (at n = 25: at least 30 % below the FNO and below neuraloperator's CODANO)
are generated from the rows; selecting one seed (``python -m benchmarks table codano_fewshot --where
row.seed=0``) adds its per-variable, zero-shot, pretraining and timing tables. The machinery (models,
symmetries, training loop) is :mod:`benchmarks._codano_fewshot`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from .harness import int_param, module_benchmarks

NS_VARS, BOUS_VARS = ["u", "v", "w"], ["u", "v", "w", "theta"]
LR = dict(pretrain=3e-3, finetune=5e-3, scratch=5e-3)
WEIGHT_DECAY, GRAD_CLIP, MASK_FRACTION = 1e-4, 1.0, 0.5
ANCHOR_HIDDEN, FNO_HIDDEN, MODES = 12, 28, 8
WRAPPERS = {
    "CoDANO (sciattn)": "none (forward(x, variables, masked), add_variable)",
    "CODANO (neuralop 2.0)": "AnchorAdapter: ids→input_variable_ids, masked channel→0, drops y; "
                             "add_variable→_extend_positional_encoding([name])",
    "FNO (from scratch)": "none",
}
#: The three models' names, in table order (CoDANO, the anchor, the FNO).
MODELS = tuple(WRAPPERS)
PERSISTENCE = "persistence"
#: The two test metrics every fine-tuned model records (key of the training info: label): its own prediction,
#: and its half-turn average.
METRICS = {"test": "plain predictions", "test_half_turn_averaged": "half-turn averaged"}
AUGMENTATIONS = ("none", "shift", "symmetry")
AUGMENT_TEXT = {
    "none": "No augmentation. ",
    "shift": "Every fine-tuning batch (all three models; not the NS pretraining) is augmented by rolling each pair "
             "by (s, -s) cells, s uniform, an exact symmetry of the forced system on the torus. ",
    "symmetry": "Every fine-tuning batch (all three models; not the NS pretraining) is augmented with the forced "
                "system's symmetries: each pair is rolled by (s, -s) cells, s uniform, and with probability 1/2 "
                "turned by π about (1/8, 0) (u, v and theta change sign, w does not); both are exact. ",
}
CONFIG_KEYS = ("res", "fine", "ns_train", "ns_test", "pool", "test", "n_values", "pretrain_steps", "finetune_steps",
               "batch")

SCHEMA = {
    "seed": "int", "model": "str",
    "stage": "str",  # "pretrain" (NS held-out), "zero_shot", "fine_tune" (Boussinesq test), "persistence"
    "data": "str",  # the pairs tested: "ns" (held out) or "boussinesq" (test)
    "n": "int?",  # Boussinesq pairs fine-tuned on (0: zero-shot; None: pretraining and persistence)
    "parameters": "int",
    "error": "float", "error_u": "float", "error_v": "float", "error_w": "float", "error_theta": "float?",
    "averaged": "float?", "averaged_u": "float?", "averaged_v": "float?", "averaged_w": "float?",
    "averaged_theta": "float?",  # the half-turn averaged prediction (fine-tuned models only)
    "seconds": "float?", "steps": "int?", "batch": "int?", "lr": "float?", "final_train_loss": "float?",
    "seed_seconds": "float",  # the seed's whole run (data, pretraining, fine-tuning, tests)
    "trainer_call": "str?",  # the anchor's pretraining row: what CODANO(x=x, y=y) (neuralop's Trainer call) gives
}
PARAMS = {
    "seeds": [0, 1, 2], "res": 32, "fine": 64, "ns_train": 350, "ns_test": 50, "pool": 100, "test": 50,
    "n_values": [5, 25, 100], "pretrain_steps": 1200, "finetune_steps": 400, "batch": 8, "beta": 0.2,
    "augment": "symmetry", "theta_like": None, "residual": True, "ours_width": 32, "ours_heads": 4,
    "ours_head_channels": 2, "ours_mlp_ratio": 4, "cache": "~/.cache/sciattn",
}
QUICK = {"seeds": [0], "res": 16, "fine": 32, "ns_train": 16, "ns_test": 8, "pool": 10, "test": 10,
         "n_values": [5, 10], "pretrain_steps": 6, "finetune_steps": 4, "batch": 4}


def check_params(p: dict) -> dict:
    """``p`` if every parameter is valid; a ValueError naming the first bad one otherwise."""
    def positive_int(key: str) -> int:
        return int_param(p, key, 1)

    seeds = p["seeds"]
    if (not isinstance(seeds, list) or not seeds or len(set(map(str, seeds))) != len(seeds)
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)):
        raise ValueError(f"seeds: expected a non-empty list of distinct non-negative integers, got {seeds!r}")
    for key in ("res", "fine", "ns_train", "ns_test", "pool", "test", "pretrain_steps", "finetune_steps", "batch",
                "ours_width", "ours_heads", "ours_head_channels", "ours_mlp_ratio"):
        positive_int(key)
    if p["res"] % 4:
        raise ValueError(f"res: expected a multiple of 4 (the half-turn maps grid points to grid points), "
                         f"got {p['res']!r}")
    if p["fine"] % p["res"] or p["fine"] % 2:
        raise ValueError(f"fine: expected an even multiple of res = {p['res']}, got {p['fine']!r}")
    ns = p["n_values"]
    if (not isinstance(ns, list) or not ns or len(set(map(str, ns))) != len(ns)
            or any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= p["pool"] for n in ns)):
        raise ValueError(f"n_values: expected a non-empty list of distinct sizes in 1..{p['pool']} (the fine-tuning "
                         f"pool), got {ns!r}")
    beta = p["beta"]
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not beta >= 0 or beta == float("inf"):
        raise ValueError(f"beta: expected a finite non-negative number, got {beta!r}")
    if p["augment"] not in AUGMENTATIONS:
        raise ValueError(f"augment: expected one of {list(AUGMENTATIONS)}, got {p['augment']!r}")
    if p["theta_like"] is not None and p["theta_like"] not in NS_VARS:
        raise ValueError(f"theta_like: expected null or one of {NS_VARS}, got {p['theta_like']!r}")
    if not isinstance(p["residual"], bool):
        raise ValueError(f"residual: expected true or false, got {p['residual']!r}")
    if not isinstance(p["cache"], str) or not p["cache"]:
        raise ValueError(f"cache: expected a folder path (a string), got {p['cache']!r}")
    return p


def _errors(prefix: str, errs: dict | None) -> dict:
    """``{prefix: errs["all"], prefix_u: errs["u"], ...}`` (``None`` for what ``errs`` lacks)."""
    errs = errs or {}
    return {prefix: errs.get("all"), **{f"{prefix}_{v}": errs.get(v) for v in BOUS_VARS}}


def result_rows(seed: int, results: dict, ns_persistence: dict, seed_seconds: float,
                trainer_call: str | None) -> list[dict]:
    """The rows of one seed from its per-model ``results`` (the models' pretraining, zero-shot and fine-tuning
    entries, and ``results["persistence"]["test"]``), the NS persistence errors and the seed's wall time."""
    out = []

    def add(model, stage, data, n, parameters, errs, info=None, averaged=None, call=None):
        info = info or {}
        out.append({"seed": seed, "model": model, "stage": stage, "data": data, "n": n, "parameters": parameters,
                    **_errors("error", errs), **_errors("averaged", averaged),
                    **{k: info.get(k) for k in ("seconds", "steps", "batch", "lr", "final_train_loss")},
                    "seed_seconds": seed_seconds, "trainer_call": call})

    for name in MODELS:
        r = results[name]
        if r.get("pretrain"):
            add(name, "pretrain", "ns", None, r["pretrain"]["parameters"], r["pretrain"]["ns_test"], r["pretrain"],
                call=trainer_call if name == MODELS[1] else None)
        if r.get("zero_shot"):
            add(name, "zero_shot", "boussinesq", 0, r["parameters"], r["zero_shot"])
        for n, info in r["finetune"].items():
            add(name, "fine_tune", "boussinesq", int(n), r["parameters"], info["test"], info,
                averaged=info.get("test_half_turn_averaged"))
    add(PERSISTENCE, "persistence", "ns", None, 0, ns_persistence)
    add(PERSISTENCE, "persistence", "boussinesq", None, 0, results[PERSISTENCE]["test"])
    return out


def run_seed(p: dict, seed: int) -> list[dict]:
    """One seed's pretraining, fine-tuning and tests (:mod:`benchmarks._codano_fewshot`), as rows."""
    import torch

    from . import _codano_fewshot as fs

    t_start = time.perf_counter()
    cfg = {k: p[k] for k in CONFIG_KEYS}
    residual = p["residual"]
    data = fs.load(Path(p["cache"]).expanduser(), cfg, seed=seed, beta=p["beta"])
    ns_scale = fs.rms(*data["ns_train"])
    ns_train, ns_test = fs.scaled(data["ns_train"], ns_scale), fs.scaled(data["ns_test"], ns_scale)
    ours = dict(width=p["ours_width"], n_heads=p["ours_heads"], head_channels=p["ours_head_channels"],
                mlp_ratio=p["ours_mlp_ratio"])
    results, pretrained = fs.pretrain_codomain_models(ns_train, ns_test, cfg, seed=seed, residual=residual,
                                                      ours=ours)
    for n in cfg["n_values"]:
        train_set, test_set = fs.fewshot_split(data, ns_scale, n)
        for name, r in results.items():
            r["finetune"][str(n)] = fs.finetune_and_test(name, r, pretrained, train_set, test_set, cfg, seed=seed,
                                                         n=n, residual=residual, augment=p["augment"],
                                                         theta_like=p["theta_like"])
    with torch.no_grad():  # persistence baseline y_hat = x (scale-free, so on the raw fields)
        e = fs.per_variable_rel_l2(*data["test"])
        results[PERSISTENCE] = {"test": {"all": e.mean().item(), **{v: e[:, j].mean().item()
                                                                    for j, v in enumerate(BOUS_VARS)}}}
        e = fs.per_variable_rel_l2(*data["ns_test"])
        ns_pers = {"all": e.mean().item(), **{v: e[:, j].mean().item() for j, v in enumerate(NS_VARS)}}
    try:  # neuralop's Trainer calls model(**{"x": x, "y": y}); document what CODANO does with it
        pretrained[MODELS[1]].model(x=ns_test[0][:1], y=ns_test[1][:1])
        call = "accepted"
    except TypeError as err:
        call = f"TypeError: {err}"
    return result_rows(seed, results, ns_pers, time.perf_counter() - t_start, call)


def run(params: dict) -> list[dict]:
    p = check_params(params)
    return [row for seed in p["seeds"] for row in run_seed(p, seed)]


# ------------------------------------------------------------------------------------------- report
def _seeds(rows: list[dict]) -> list[int]:
    return list(dict.fromkeys(r["seed"] for r in rows))


def _n_values(rows: list[dict]) -> list[int]:
    return sorted({r["n"] for r in rows if r["stage"] == "fine_tune"})


def target_n(rows: list[dict]) -> int:
    """The size the target is judged at: 25 if fine-tuned on, else the largest."""
    ns = _n_values(rows)
    return 25 if 25 in ns else ns[-1]


def _fine_tuned(rows: list[dict]) -> dict:
    return {(r["seed"], r["model"], r["n"]): r for r in rows if r["stage"] == "fine_tune"}


def _fmt(v, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _mean_std(values: list) -> str:
    if any(v is None for v in values):
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"**{statistics.mean(values):.4f}** ± {statistics.stdev(values):.4f}"


def versus(gain: float) -> str:
    """``gain = 1 - ours / reference`` as ``"18.9% lower"`` or ``"2.1% higher"``."""
    return f"{100 * gain:.1f}% lower" if gain >= 0 else f"{-100 * gain:.1f}% higher"


def verdict(rows: list[dict], metric: str = "error") -> dict:
    """The target at :func:`target_n` by ``metric`` (``"error"``: the models' own predictions, ``"averaged"``:
    their half-turn averages): CoDANO's gain over the FNO per seed and of the mean errors over seeds, and
    whether it is at least 30 % below the FNO and below neuralop's CODANO by the mean errors and in every seed
    (``None`` when a seed lacks the metric)."""
    ft, seeds, n = _fine_tuned(rows), _seeds(rows), target_n(rows)
    e = {m: [ft[s, m, n][metric] for s in seeds] for m in MODELS}
    if any(v is None for vals in e.values() for v in vals):
        return {}
    ours, anchor, fno = (e[m] for m in MODELS)
    gains = [1 - o / f for o, f in zip(ours, fno)]
    mean = {m: statistics.mean(v) for m, v in e.items()}
    mean_gain = 1 - mean[MODELS[0]] / mean[MODELS[2]]
    return {"n": n, "seeds": seeds, "gains": gains, "gain_of_mean_errors": mean_gain,
            "target_met_by_mean": mean_gain >= 0.3 and mean[MODELS[0]] < mean[MODELS[1]],
            "target_met_by_every_seed": min(gains) >= 0.3 and all(o < a for o, a in zip(ours, anchor))}


def table(records: list[dict]) -> str:
    """Test relative L2 per model, seed and n (both metrics) with the mean ± std over seeds; for one seed, its
    per-variable errors (zero-shot, fine-tuned, persistence), pretraining and timings as well."""
    rows = [r["row"] for r in records]
    seeds, ns, ft = _seeds(rows), _n_values(rows), _fine_tuned(rows)
    pers = {r["seed"]: r for r in rows if r["stage"] == "persistence" and r["data"] == "boussinesq"}
    cols = [f"n={n}" for n in ns] + [f"n={n}, averaged" for n in ns]
    lines = ["Test relative L2 on Boussinesq (mean over the test samples and the 4 variables; lower is better) of "
             "each model's own prediction P(x) and of its half-turn average ½ (P(x) + T P(T x)) (\"averaged\"; T "
             "the half-turn, an exact symmetry of the system; no retraining)"
             + (", per seed and mean ± standard deviation over seeds:" if len(seeds) > 1 else ":"), "",
             "| model | seed | parameters | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    for m in MODELS:
        for s in seeds:
            cells = [_fmt(ft[s, m, n]["error"]) for n in ns] + [_fmt(ft[s, m, n]["averaged"]) for n in ns]
            lines.append(f"| {m} | {s} | {ft[s, m, ns[0]]['parameters']:,} | " + " | ".join(cells) + " |")
        if len(seeds) > 1:
            cells = [_mean_std([ft[s, m, n][k] for s in seeds]) for k in ("error", "averaged") for n in ns]
            lines.append(f"| {m} | **mean** | | " + " | ".join(cells) + " |")
    for s in seeds:
        if s in pers:
            lines.append(f"| persistence (y = x) | {s} | 0 | " + " | ".join(_fmt(pers[s]["error"]) for _ in ns)
                         + " | —" * len(ns) + " |")
    if len(seeds) == 1:
        lines += ["", *_seed_detail(rows)]
    return "\n".join(lines)


def _seed_detail(rows: list[dict]) -> list[str]:
    """One seed's per-variable errors and its pretraining / fine-tuning times."""
    ns = _n_values(rows)
    lines = ["Per variable (test relative L2; \"averaged\": half-turn averaged):", "",
             "| model | n | " + " | ".join(BOUS_VARS) + " |", "|---|---|" + "---|" * len(BOUS_VARS)]
    order = {"zero_shot": 0, "fine_tune": 1}
    for m in MODELS:
        mine = sorted((r for r in rows if r["model"] == m and r["stage"] in order),
                      key=lambda r: (order[r["stage"]], r["n"]))
        for key, label in (("error", "{n}"), ("averaged", "{n}, averaged")):
            for r in mine:
                if r[f"{key}_u"] is None:
                    continue
                n = "0 (no fine-tuning)" if r["stage"] == "zero_shot" else label.format(n=r["n"])
                lines.append(f"| {m} | {n} | " + " | ".join(_fmt(r[f"{key}_{v}"]) for v in BOUS_VARS) + " |")
    for r in rows:
        if r["stage"] == "persistence" and r["data"] == "boussinesq":
            lines.append("| persistence | – | " + " | ".join(_fmt(r[f"error_{v}"]) for v in BOUS_VARS) + " |")
    lines += ["", "Pretraining (NS held-out one-step relative L2, no masking) and training times:", "",
              "| model | wrapper / adaptation | parameters (pretrained) | NS held-out | pretrain s | fine-tune s ("
              + ", ".join(f"n={n}" for n in ns) + ") |", "|---|---|---|---|---|---|"]
    for m in MODELS:
        pre = next((r for r in rows if r["model"] == m and r["stage"] == "pretrain"), None)
        fts = {r["n"]: r for r in rows if r["model"] == m and r["stage"] == "fine_tune"}
        lines.append(f"| {m} | {WRAPPERS[m]} | " + (f"{pre['parameters']:,} | {pre['error']:.4f} | "
                                                    f"{pre['seconds']:.0f}" if pre else "– | – | –")
                     + " | " + ", ".join(_fmt(fts[n]["seconds"], 0) for n in ns) + " |")
    for r in rows:
        if r["stage"] == "persistence" and r["data"] == "ns":
            lines.append(f"| persistence (y = x) | – | 0 | {r['error']:.4f} | – | – |")
    return lines


def _protocol(p: dict) -> str:
    return (
        f"pretrain both codomain models for {p['pretrain_steps']} steps (batch {p['batch']}, AdamW lr "
        f"{LR['pretrain']}, weight decay {WEIGHT_DECAY}, OneCycle, grad clip {GRAD_CLIP}) on NS masked one-step "
        f"prediction (in {MASK_FRACTION:.0%} of the samples one random input variable is hidden: ours by its learned "
        "mask field, the anchor by zeroing the channel; the target is the full next state); then add `theta` and "
        f"fine-tune all weights for {p['finetune_steps']} steps (batch min(n, {p['batch']}), lr {LR['finetune']}). "
        f"FNO: from scratch on the same n pairs, same steps and batch, lr {LR['scratch']}. "
        + AUGMENT_TEXT[p["augment"]]
        + ("All models predict the increment, y_hat = x + f(x) (the same residual head for all). " if p["residual"]
           else "All models predict y directly. ")
        + "Fields divided by per-variable RMS (u, v, w: NS training set; theta: the n fine-tuning pairs). "
        "Loss and metric: relative L2 per sample and variable (neuralop LpLoss), mean over variables."
    )


def notes(records: list[dict]) -> str:
    """The gains and the target verdict of both metrics, who beats whom in how many seeds, the data, the
    protocol and the hyperparameters (from the run's parameters), the timings and the anchor's Trainer call."""
    rows, p = [r["row"] for r in records], records[0]["params"]
    seeds, ns, ft = _seeds(rows), _n_values(rows), _fine_tuned(rows)
    out = []
    for metric, label in (("error", "plain predictions"), ("averaged", "half-turn averaged")):
        v = verdict(rows, metric)
        if not v:
            continue
        spread = (f" (per-seed gains {100 * statistics.mean(v['gains']):.1f}% ± "
                  f"{100 * statistics.stdev(v['gains']):.1f}%)" if len(seeds) > 1 else "")
        out.append(f"{label.capitalize()}: CoDANO against the FNO at n = {v['n']}, per seed: "
                   + ", ".join(f"seed {s} {versus(g)}" for s, g in zip(seeds, v["gains"]))
                   + (f"; of the mean errors over {len(seeds)} seeds {versus(v['gain_of_mean_errors'])}{spread}"
                      if len(seeds) > 1 else "")
                   + f". Target (n = {v['n']}: at least 30% below the FNO and below neuralop CODANO): "
                   + (f"by the mean errors {'MET' if v['target_met_by_mean'] else 'NOT MET'}; in every seed "
                      if len(seeds) > 1 else "")
                   + f"{'MET' if v['target_met_by_every_seed'] else 'NOT MET'}.")

    def count(metric, other):
        return " / ".join(str(sum(ft[s, MODELS[0], n][metric] < ft[s, other, n][metric] for s in seeds)) for n in ns)

    out.append(f"CoDANO's own prediction is below neuralop CODANO's in {count('error', MODELS[1])} of {len(seeds)} "
               f"seeds at n = {' / '.join(map(str, ns))}, and below the FNO's in {count('error', MODELS[2])} "
               f"(half-turn averaged: {count('averaged', MODELS[1])} and {count('averaged', MODELS[2])}).")
    params = [ft[seeds[0], m, ns[0]]["parameters"] for m in MODELS]
    out.append("Parameters CoDANO {:,} / CODANO {:,} / FNO {:,}: ".format(*params)
               + ("similar (within ±30%)." if max(params) <= 1.3 * min(params) else "NOT similar (beyond ±30%)."))
    secs = {m: statistics.mean(ft[s, m, n]["seconds"] for s in seeds for n in ns) for m in MODELS}
    walls = [next(r["seed_seconds"] for r in rows if r["seed"] == s) for s in seeds]
    out.append("Wall time per seed " + " / ".join(f"{w / 60:.1f}" for w in walls)
               + (f" min ({sum(walls) / 60:.0f} min in all)" if len(seeds) > 1 else " min")
               + "; mean fine-tuning time per n: " + ", ".join(f"{m} {secs[m]:.0f} s" for m in MODELS) + ".")
    out.append(
        f"Data: one-step pairs t=1 → t=1.5 at {p['res']}² (solved at {p['fine']}²), new initial states for every "
        f"seed. NS: {p['ns_train']} train / {p['ns_test']} held out. Boussinesq (buoyancy β = {p['beta']}"
        + (", a passive scalar" if p["beta"] == 0 else "") + f"): fine-tuning on the first n of a pool of "
        f"{p['pool']} (nested), test on {p['test']} other pairs.")
    out.append("Protocol: " + _protocol(p))
    theta = ("a freshly initialised theta encoding" if p["theta_like"] is None else
             f"theta's encoding copied from {p['theta_like']}'s (both codomain models)")
    out.append(
        f"Hyperparameters: CoDANO width {p['ours_width']}, 4 layers, {p['ours_heads']} heads × "
        f"{p['ours_head_channels']} channels, spectral Q/K/V with {MODES} modes, MLP ratio {p['ours_mlp_ratio']}, "
        f"encodings 4 channels |k| ≤ 4. neuralop CODANO: hidden_variable_codimension {ANCHOR_HIDDEN} = "
        f"attention_token_dim (one token per variable), lifting/projection {2 * ANCHOR_HIDDEN}, 4 CODALayers, 2 heads "
        f"× {ANCHOR_HIDDEN // 2}, n_modes {MODES}, positional encoding 4 channels modes [8, 8], default Tucker "
        f"factorisation, domain_padding None (periodic data). FNO: hidden {FNO_HIDDEN}, 4 layers, {MODES}×{MODES} "
        "modes. Neither codomain model's maths was changed; the adapter only renames arguments, zeroes masked "
        "channels and drops extra keywords; one shared training loop (neuralop's Trainer is not used). Zero-shot "
        f"rows (n = 0): the pretrained model with {theta}.")
    calls = list(dict.fromkeys(r["trainer_call"] for r in rows if r["trainer_call"]))
    if calls:
        out.append("Measured: `CODANO(**{'x': x, 'y': y})` (neuralop's Trainer call) → " + "; ".join(calls) + ".")
    commands = list(dict.fromkeys(r["command"] for r in records))
    if len(commands) > 1:
        out.append("Seeds run by " + ", ".join(f"`{c}`" for c in commands) + ".")
    return "\n\n".join(out)


BENCHMARKS = module_benchmarks(globals(), packages=("neuraloperator",),
    description="Few-shot multiphysics (NS pretraining, Boussinesq fine-tuning with the new variable theta): "
                "CoDANO against neuraloperator's CODANO and a from-scratch FNO;",
    claim="after NS pretraining CoDANO beats neuraloperator's CODANO at every few-shot size, and the FNO by at "
          "least 30% at n = 25 by the mean errors over three seeds only with the half-turn average "
          "(docs/benchmarks/codano.md)",
)
