"""The transformer neural operator on the paper's controlled ODE, trained at one sampling rate and tested at others.

The problem of ``paper_run_scripts/1d_experiments_CDE`` (EdoardoCalvello/TransformerNeuralOperators @ a546ae0,
``datasets.py: ControlledODE``): a control path and the state it drives on ``[0, T)``, ``T = 2``::

    u(t) = Σ_{i=1}^{10} ξ_i / c_i · sin(π f_i t),   ξ_i ~ N(0, 1),  f_i ~ U(0, 10),  c = linspace(1, 10, 10)
    v'(t) = sin(v(t)) u'(t),   v(0) = 1     =>     v(t) = 2 arctan(tan(1/2) e^{u(t)})

The published code integrates the ODE numerically (``torchdiffeq.odeint``); we use the closed form, exact at any
time. The operator learns ``u -> v`` from ``n_train`` paths sampled every ``train_dt`` (times ``arange(0, T, dt)``,
the published layout), inputs and outputs standardised by the training set's mean and standard deviation and an MSE
loss (published), and is tested on ``n_test`` fresh paths at every ``test_dts`` (the run scripts' zero-shot rates
0.005 ... 0.02) and on the non-uniform sampling the published ``solve`` carries commented out (the first half of the
times at ``train_dt``, the second half at ``2 train_dt``). The model takes the times as a point set with the
trapezoid weights of the sample times (the published 1-D rule); at test time it is also evaluated with equal weights
(``weights="equal"``: the plain softmax, the published rule off 1-D), which is the same on uniform samplings up to the
two end points and is biased towards the densely sampled half on the non-uniform one.

The paper's model (d_model 128, 6 layers, 8 heads, 10 000 paths, 100 epochs on a GPU) is scaled down to a CPU budget
(``PARAMS``); the paper's error figures for this problem could not be retrieved here, so no published number is set
beside ours (docs/operators/continuum_transformer.md).

    python -m benchmarks run continuum_cde [--quick]
"""

from __future__ import annotations

import math
import time
from typing import Any

from benchmarks.harness import int_param, module_benchmarks

PARAMS: dict[str, Any] = {
    "n_train": 512, "n_test": 128, "T": 2.0, "train_dt": 0.01, "test_dts": [0.005, 0.0075, 0.01, 0.015, 0.02],
    "width": 32, "n_layers": 2, "n_heads": 4, "dim_ff": 64, "epochs": 40, "batch": 32, "lr": 1e-3, "seed": 0,
}
QUICK: dict[str, Any] = {"n_train": 128, "n_test": 32, "epochs": 8, "test_dts": [0.01, 0.02]}
SCHEMA = {"operator": "str", "parameters": "int", "sampling": "str", "points": "int", "weights": "str",
          "rel_l2": "float", "seconds": "float"}
COLUMNS = ("operator", "sampling", "points", "weights", "rel_l2")
LABELS = {"rel_l2": "test rel. L2"}


def times(T: float, dt: float, nonuniform: bool = False):
    """The published sample times ``arange(0, T, dt)``; ``nonuniform``: the first half kept, every other one of
    the second half (float64, ``(N,)``)."""
    import torch

    t = torch.arange(0, T, dt, dtype=torch.float64)
    if nonuniform:
        half = len(t) // 2
        t = torch.cat([t[:half], t[half::2]])
    return t


def trapezoid_weights(t):
    """Trapezoid weights ``(N,)`` of sorted times ``t`` ``(N,)``: ``½ (t_{j+1} - t_{j-1})``, halves at the ends."""
    import torch

    dx = t[1:] - t[:-1]
    w = torch.zeros_like(t)
    w[1:] += 0.5 * dx
    w[:-1] += 0.5 * dx
    return w


def paths(n: int, seed: int):
    """``(xi, freqs)`` ``(n, 10)`` each: the published control's random coefficients and frequencies."""
    import torch

    g = torch.Generator().manual_seed(seed)
    xi = torch.randn(n, 10, generator=g, dtype=torch.float64)
    freqs = 10 * torch.rand(n, 10, generator=g, dtype=torch.float64)
    return xi, freqs


def control_and_state(xi, freqs, t):
    """``(u, v)`` ``(n, N)``: the control ``u`` at times ``t`` and the exact state ``v`` it drives from ``v(0) = 1``."""
    import torch

    decay = 1 / torch.linspace(1, 10, 10, dtype=torch.float64)
    u = torch.einsum("ni,nit->nt", xi * decay, torch.sin(math.pi * freqs[:, :, None] * t))
    return u, 2 * torch.atan(math.tan(0.5) * torch.exp(u))


def rel_l2(pred, true, t) -> float:
    """Mean over the paths of the relative L2 error in time, with the trapezoid rule of the sample times ``t``."""
    w = trapezoid_weights(t)
    return float((((pred - true).square() * w).sum(1).sqrt() / (true.square() * w).sum(1).sqrt()).mean())


def check_params(params: dict[str, Any]) -> None:
    for key in ("n_train", "n_test", "width", "n_layers", "n_heads", "dim_ff", "epochs", "batch"):
        int_param(params, key)
    int_param(params, "seed", 0)
    dts = params["test_dts"]
    if not isinstance(dts, list) or not dts or any(not isinstance(d, (int, float)) or not 0 < d < params["T"] / 4
                                                   for d in [*dts, params["train_dt"]]):
        raise ValueError(f"test_dts, train_dt: expected time steps in (0, T/4 = {params['T'] / 4}), got "
                         f"test_dts={dts!r}, train_dt={params['train_dt']!r}")


def run(params: dict) -> list[dict]:
    import torch

    from sciattn.operators import create_operator

    check_params(params)
    torch.set_num_threads(1)
    T, dt, seed = float(params["T"]), float(params["train_dt"]), params["seed"]
    t0 = times(T, dt)
    u, v = control_and_state(*paths(params["n_train"], seed), t0)
    (mu_u, sd_u), (mu_v, sd_v) = (u.mean(), u.std()), (v.mean(), v.std())
    x, y = ((u - mu_u) / sd_u)[..., None].float(), ((v - mu_v) / sd_v)[..., None].float()
    torch.manual_seed(seed)
    model = create_operator("continuum_transformer", in_channels=1, out_channels=1, spatial_dims=1,
                            width=params["width"], n_layers=params["n_layers"], n_heads=params["n_heads"],
                            dim_ff=params["dim_ff"])
    n_params = sum(p.numel() for p in model.parameters())

    def inputs(t, batch):
        return t[None, :, None].float().expand(batch, -1, -1), trapezoid_weights(t).float().expand(batch, -1)

    opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
    gen = torch.Generator().manual_seed(seed + 1)
    start = time.perf_counter()
    model.train()
    bsz = params["batch"]
    pos, w = inputs(t0, bsz)
    for _ in range(params["epochs"]):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x) - bsz + 1, bsz):
            idx = perm[i:i + bsz]
            loss = (model(x[idx], pos, weights=w) - y[idx]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - start
    model.eval()
    xi, freqs = paths(params["n_test"], seed + 2)
    rows = []
    samplings = [(f"dt={d:g}", times(T, float(d))) for d in params["test_dts"]]
    samplings.append((f"dt={dt:g} | {2 * dt:g}", times(T, dt, nonuniform=True)))
    with torch.no_grad():
        for label, t in samplings:
            ut, vt = control_and_state(xi, freqs, t)
            pos, w = inputs(t, len(ut))
            rows.append({"operator": "training mean", "parameters": 0, "sampling": label, "points": len(t),
                         "weights": "n/a", "rel_l2": rel_l2(torch.full_like(vt, float(mu_v)), vt, t),
                         "seconds": 0.0})
            for weights in ("trapezoid", "equal"):
                pred = model(((ut - mu_u) / sd_u)[..., None].float(), pos, weights=w if weights == "trapezoid"
                             else None)[..., 0].double() * sd_v + mu_v
                rows.append({"operator": "continuum_transformer", "parameters": n_params, "sampling": label,
                             "points": len(t), "weights": weights, "rel_l2": rel_l2(pred, vt, t), "seconds": seconds})
    return rows


def notes(records: list[dict]) -> str:
    p = records[0]["params"]
    r = next(x["row"] for x in records if x["row"]["operator"] != "training mean")
    return (f"Controlled ODE v' = sin(v) u' of the paper's CDE runs, exact solution; {p['n_train']} training and "
            f"{p['n_test']} test paths on [0, {p['T']:g}), trained at dt = {p['train_dt']:g} with trapezoid weights "
            f"({p['epochs']} epochs, Adam lr {p['lr']:g}, batch {p['batch']}, MSE on standardised data; width "
            f"{p['width']}, {p['n_layers']} layers, {p['n_heads']} heads, {r['parameters']} parameters, "
            f"{r['seconds']:.0f} s on one thread); `rel_l2`: mean relative L2 error in time at each test sampling "
            f"(zero-shot off dt = {p['train_dt']:g}); `dt | 2dt`: the published non-uniform sampling; "
            f"`weights`: the trapezoid weights of the samples, or equal weights (plain softmax); `training mean`: answering "
            f"the training set's mean state.")


BENCHMARKS = module_benchmarks(globals(), columns=COLUMNS, labels=LABELS,
    description="The transformer neural operator on the paper's controlled ODE (u -> v, v' = sin(v) u'), trained at "
                "one sampling rate and tested at others;",
    claim="continuum attention with quadrature weights keeps its error at unseen and non-uniform samplings of the "
          "paper's controlled ODE (docs/operators/continuum_transformer.md)",
)
