"""Fastmax attention against dense softmax attention and against the dense form of its own kernel: error and time
against N (issue 37, item 4; FAST, arXiv 2402.07901, armingerami/fastmax).

For each ``N`` (``sizes``), one batch of ``heads`` heads of ``q``, ``k``, ``v`` ``(1, H, N, dim)`` drawn from
``N(0, 1)`` (seed ``seed``), in float32 on one thread, three methods run side by side in this one process:

- ``fastmax``: :func:`sciattn.multipole.fastmax_attention`, the factorised moments (linear in ``N``);
- ``fastmax_dense``: :func:`sciattn.multipole.fastmax_dense`, the ``N x N`` matrix of the same polynomial kernel,
  ``block`` query rows at a time (quadratic time);
- ``softmax``: ``torch.nn.functional.scaled_dot_product_attention`` on the same normalised ``q``, ``k`` (the
  published ``normalize``: the largest token norm becomes ``lim``; scale 1, no ``1/sqrt(d)``), the attention
  Fastmax approximates.

``seconds`` is the fastest of ``reps`` forward calls. Up to ``error_max`` points each method's float32 output is
compared with two float64 oracles: the dense matrix of the Fastmax kernel (``rel_err_vs_kernel``) and dense
softmax attention (``rel_err_vs_softmax``), ``||o - o_ref|| / ||o_ref||`` over all heads. The notes fit the time
exponent ``p`` (time ∝ ``N^p``, least squares in log-log, over the sizes from ``fit_from`` on) and set the published
forward timings of the FAST README beside ours (their machine and sizes, not ours).

    python -m benchmarks run fastmax_attention [--quick]
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import int_param, module_benchmarks

PARAMS: dict[str, Any] = {
    "sizes": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536], "heads": 4, "dim": 16, "order": 2, "lim": 1.0,
    "dense_max": 16384, "error_max": 4096, "fit_from": 1024, "block": 1024, "reps": 3, "seed": 0,
}
QUICK: dict[str, Any] = {"sizes": [256, 512, 1024, 2048], "dense_max": 2048, "error_max": 1024, "fit_from": 512,
                         "reps": 1}
SCHEMA = {"method": "str", "n": "int", "seconds": "float", "rel_err_vs_kernel": "float?",
          "rel_err_vs_softmax": "float?"}
METHODS = ("fastmax", "fastmax_dense", "softmax")
#: The FAST README's forward times on an RTX A6000 (B=64, H=8, D=32, p=2), seconds at N = 1000 and 10000
#: (armingerami/fastmax @ 28eb11a, README.md, "Some forward pass numbers on RTX A6000").
PUBLISHED = {"CUDA kernel": (0.11, 1.09), "PyTorch path": (0.08, 1.26)}
CLAIM_MAX_EXPONENT = 1.15


def check_params(params: dict[str, Any]) -> None:
    for key in ("heads", "dim", "dense_max", "error_max", "fit_from", "block", "reps"):
        int_param(params, key)
    int_param(params, "seed", 0)
    sizes = params["sizes"]
    if not isinstance(sizes, list) or not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 2
                                                       for n in sizes):
        raise ValueError(f"sizes: expected a non-empty list of point counts >= 2, got {sizes!r}")
    if params["order"] not in (1, 2):
        raise ValueError(f"order: expected 1 or 2, got {params['order']!r}")
    lim = params["lim"]
    if isinstance(lim, bool) or not isinstance(lim, (int, float)) or not lim > 0:
        raise ValueError(f"lim: expected a positive number, got {lim!r}")


def _rel(a, b) -> float:
    return float((a.double() - b).norm() / b.norm())


def _inputs(n: int, params: dict[str, Any]):
    import torch

    g = torch.Generator().manual_seed(params["seed"] + n)
    return [torch.randn(1, params["heads"], n, params["dim"], generator=g, dtype=torch.float64) for _ in range(3)]


def _methods(params: dict[str, Any]):
    """``{name: fn(q, k, v)}``; softmax normalises ``q`` and ``k`` as Fastmax does (scale 1)."""
    import torch

    from sciattn.multipole import fastmax_attention, fastmax_dense
    from sciattn.multipole.fastmax import fastmax_normalize

    kw = dict(order=params["order"], normalize="max", lim=float(params["lim"]))

    def softmax(q, k, v):
        q, k = fastmax_normalize(q, "max", kw["lim"]), fastmax_normalize(k, "max", kw["lim"])
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)

    return {"fastmax": lambda q, k, v: fastmax_attention(q, k, v, **kw),
            "fastmax_dense": lambda q, k, v: fastmax_dense(q, k, v, block=params["block"], **kw),
            "softmax": softmax}


def run(params: dict[str, Any]) -> list[dict]:
    from functools import partial

    import torch

    from benchmarks._timing import best_time

    check_params(params)
    torch.set_num_threads(1)
    methods = _methods(params)
    rows = []
    with torch.no_grad():
        for n in params["sizes"]:
            q, k, v = _inputs(n, params)
            q32, k32, v32 = q.float(), k.float(), v.float()
            oracles = None
            if n <= params["error_max"]:
                oracles = (methods["fastmax_dense"](q, k, v), methods["softmax"](q, k, v))
            for name, fn in methods.items():
                if name != "fastmax" and n > params["dense_max"]:
                    continue
                out = fn(q32, k32, v32)
                seconds = best_time(partial(fn, q32, k32, v32), params["reps"])
                rows.append({"method": name, "n": n, "seconds": seconds,
                             "rel_err_vs_kernel": None if oracles is None else _rel(out, oracles[0]),
                             "rel_err_vs_softmax": None if oracles is None else _rel(out, oracles[1])})
    return rows


def exponents(rows: list[dict], fit_from: int) -> dict[str, float | None]:
    """Per method: the least-squares slope of log(seconds) against log(N) over the sizes ``>= fit_from``."""
    from benchmarks.multipole_scaling import fit_exponent

    out = {}
    for m in METHODS:
        pts = [(r["n"], r["seconds"]) for r in rows if r["method"] == m and r["n"] >= fit_from]
        out[m] = fit_exponent([n for n, _ in pts], [s for _, s in pts])
    return out


def table(records: list[dict]) -> str:
    """One line per N: the three times, Fastmax's speed-up over dense softmax, and the errors."""
    by = {(r["row"]["method"], r["row"]["n"]): r["row"] for r in records}
    ns = sorted({n for _, n in by})
    lines = ["| N | fastmax s | fastmax_dense s | softmax s | softmax / fastmax | fastmax vs its dense kernel "
             "| fastmax vs softmax | softmax (f32) vs softmax (f64) |", "|---|---|---|---|---|---|---|---|"]

    def cell(m, n, key, fmt="{:.4g}"):
        row = by.get((m, n))
        return "—" if row is None or row[key] is None else fmt.format(row[key])

    for n in ns:
        ratio = (f"{by[('softmax', n)]['seconds'] / by[('fastmax', n)]['seconds']:.2f}"
                 if ("softmax", n) in by and ("fastmax", n) in by else "—")
        lines.append(f"| {n} | {cell('fastmax', n, 'seconds')} | {cell('fastmax_dense', n, 'seconds')} | "
                     f"{cell('softmax', n, 'seconds')} | {ratio} | {cell('fastmax', n, 'rel_err_vs_kernel', '{:.2e}')} "
                     f"| {cell('fastmax', n, 'rel_err_vs_softmax', '{:.2e}')} "
                     f"| {cell('softmax', n, 'rel_err_vs_softmax', '{:.2e}')} |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    import math

    p = records[0]["params"]
    fits = exponents([r["row"] for r in records], p["fit_from"])
    fmt = {m: "—" if e is None else f"{e:.2f}" for m, e in fits.items()}
    got = fits["fastmax"]
    verdict = "no exponent" if got is None else ("met" if got <= CLAIM_MAX_EXPONENT else "not met") + f" ({got:.2f})"
    pub = "; ".join(f"{k} {a} s -> {b} s, exponent {math.log(b / a) / math.log(10):.2f}" for k, (a, b) in
                    PUBLISHED.items())
    return (f"Batch 1, {p['heads']} heads of {p['dim']} features (values too), order {p['order']} kernel "
            f"(1, 1, 1/2), normalize `max` with lim {p['lim']}, float32 on one thread, fastest of {p['reps']} forward "
            f"calls; errors against float64 oracles up to N = {p['error_max']}; dense methods up to N = "
            f"{p['dense_max']} (`fastmax_dense` in blocks of {p['block']} query rows). Fitted time exponents over "
            f"N >= {p['fit_from']}: fastmax {fmt['fastmax']}, fastmax_dense {fmt['fastmax_dense']}, softmax "
            f"{fmt['softmax']}. Claim (Fastmax's time exponent ≤ {CLAIM_MAX_EXPONENT}): {verdict}.\n\n"
            f"Published (FAST README, RTX A6000, forward, B = 64, H = 8, D = 32, p = 2, N = 1000 -> 10000; another "
            f"machine and size, beside ours for the exponent only): {pub}. The paper's own figures (time and memory "
            f"against N against softmax on a GPU) were not retrievable here.")


BENCHMARKS = module_benchmarks(globals(),
    description="Fastmax attention (factorised moments) against the dense matrix of its own kernel and against dense "
                "softmax attention, error and time against N;",
    claim="Fastmax's forward time grows linearly in N (fitted exponent ≤ 1.15), its output equals its dense kernel's "
          "to float32 round-off, and it overtakes dense softmax attention (docs/operators/fastmax_transformer.md)",
)
