"""Variance of codomain-attention logits under grid refinement: sciattn against neuraloperator.

The same random smooth fields (fixed seed, so every grid samples the same functions; periodic
trigonometric polynomials with |k| <= 3 per axis, and non-periodic polynomials times an
exponential) are fed at 32², 64², 128² and 256² to

* ``ours``: :class:`sciattn.codomain.CodomainAttention` (spectral Q/K/V, quadrature-weighted
  scores ``Σ_x w_x q_a(x)·k_b(x) / sqrt(D)``), logits from ``attention_logits``;
* ``ours_pointwise``: the same block with pointwise Q/K/V;
* ``anchor``: ``neuralop.layers.coda_layer.CODALayer`` with one token per variable
  (``per_channel_attention=False``, ``token_codimension=C``; Q/K at full resolution);
* ``anchor_default``: ``CODALayer`` with its defaults (one token per channel, Q/K resampled to
  half resolution before the inner product).

One layer instance per method is built once (fixed seed) and evaluated at every resolution.
The anchor computes its logits inside ``compute_attention`` and passes them straight to
``F.softmax``; they are captured by temporarily replacing the module-level name ``F`` in
``neuralop.layers.coda_layer`` with a proxy whose ``softmax`` records its input and then calls
the real one. The anchor's mathematics is not changed.

The statistic is the variance of all logits (batch × heads × V × V entries) at each grid.

    python -m benchmarks run codano_logits [--quick] [--set sizes='[32, 64]']

Rows (one per fields, method and grid) are appended to ``benchmarks/results/codano_logits.jsonl``; the docs'
table is generated from the latest run.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import types
from pathlib import Path

import torch

from .harness import module_benchmarks

ROOT = Path(__file__).resolve().parents[1]
B, V, C, KMAX, MODES, SEED = 2, 4, 8, 3, 16, 0
FAMILIES = ("periodic", "nonperiodic")


def smooth_fields(n: int, family: str = "periodic") -> torch.Tensor:
    """``(B, V, C, n, n)``: the same random smooth functions at every ``n``, on the uniform nodes
    ``i/n``. ``periodic``: trigonometric polynomials (the uniform rule integrates them exactly);
    ``nonperiodic``: random cubic polynomials times ``exp(x - y)`` (first-order quadrature error,
    and a jump at the periodic boundary for the FFT)."""
    g = torch.Generator().manual_seed(SEED)
    axes = torch.meshgrid(*[torch.arange(n, dtype=torch.float64) / n] * 2, indexing="ij")
    if family == "nonperiodic":
        out = torch.zeros(B, V, C, n, n, dtype=torch.float64)
        for i, j in itertools.product(range(4), repeat=2):
            c = torch.randn(B, V, C, 1, 1, generator=g, dtype=torch.float64)
            out += c * axes[0] ** i * axes[1] ** j
        return (out * torch.exp(axes[0] - axes[1])).float()
    out = torch.zeros(B, V, C, n, n, dtype=torch.float64)
    for kx, ky in itertools.product(range(-KMAX, KMAX + 1), repeat=2):
        phase = 2 * math.pi * (kx * axes[0] + ky * axes[1])
        a, s = torch.randn(2, B, V, C, 1, 1, generator=g, dtype=torch.float64) / (1 + kx * kx + ky * ky)
        out += a * torch.cos(phase) + s * torch.sin(phase)
    return out.float()


@contextlib.contextmanager
def capture_softmax_inputs(module):
    """Record what ``module.F.softmax`` receives while the context is open (a name swap, no maths change)."""
    real = module.F
    seen: list[torch.Tensor] = []

    def softmax(t, *args, **kwargs):
        seen.append(t.detach().clone())
        return real.softmax(t, *args, **kwargs)

    module.F = types.SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    module.F.softmax = softmax
    try:
        yield seen
    finally:
        module.F = real


def build():
    from neuralop.layers import coda_layer

    from sciattn.codomain import CodomainAttention

    torch.manual_seed(SEED)
    ours = CodomainAttention(C, 1, 2, qkv="spectral", n_modes=MODES).eval()
    torch.manual_seed(SEED)
    ours_pw = CodomainAttention(C, 1, 2, qkv="pointwise").eval()
    with contextlib.redirect_stdout(io.StringIO()):  # CODALayer.__init__ prints a debug line
        torch.manual_seed(SEED)
        anchor = coda_layer.CODALayer([MODES, MODES], n_heads=1, token_codimension=C,
                                      per_channel_attention=False).eval()
        torch.manual_seed(SEED)
        anchor_default = coda_layer.CODALayer([MODES, MODES]).eval()
    return coda_layer, {"ours": ours, "ours_pointwise": ours_pw, "anchor": anchor, "anchor_default": anchor_default}


def logits(name, layer, coda_layer, x):
    if name.startswith("ours"):
        return layer.attention_logits(x)
    with capture_softmax_inputs(coda_layer) as seen:
        layer(x.flatten(1, 2))  # CODALayer takes (B, T·d, *spatial)
    if len(seen) != 1:
        raise RuntimeError(f"expected one softmax call inside CODALayer, saw {len(seen)}")
    return seen[0]


def measure(sizes: list[int]) -> list[dict]:
    """One row per (fields, method, grid): the variance and mean size of the logits."""
    coda_layer, layers = build()
    rows = []
    with torch.no_grad():
        for family in FAMILIES:
            for n in sizes:
                x = smooth_fields(n, family)
                for name, layer in layers.items():
                    s = logits(name, layer, coda_layer, x)
                    rows.append({"fields": family, "method": name, "grid": n, "points": n * n,
                                 "logit_var": s.var().item(), "logit_abs_mean": s.abs().mean().item()})
    base = {(r["fields"], r["method"]): r["logit_var"] for r in rows if r["grid"] == sizes[0]}
    for r in rows:
        r["var_ratio_to_coarsest"] = r["logit_var"] / base[r["fields"], r["method"]]
    return rows


def verdict(rows: list[dict]) -> dict[str, bool]:
    """ours within 10% of its coarsest-grid variance; the anchors growing with the number of points."""
    sizes = sorted({r["grid"] for r in rows})
    last = {(r["fields"], r["method"]): r["var_ratio_to_coarsest"] for r in rows if r["grid"] == sizes[-1]}
    n_ratio = (sizes[-1] / sizes[0]) ** 2
    out = {}
    for family in FAMILIES:
        out[f"{family}, ours within 10% of its coarsest-grid variance"] = abs(last[family, "ours"] - 1) < 0.10
        out[f"{family}, ours_pointwise within 10%"] = abs(last[family, "ours_pointwise"] - 1) < 0.10
        out[f"{family}, anchor grows with N"] = last[family, "anchor"] > 0.5 * n_ratio
        out[f"{family}, anchor_default grows with N"] = last[family, "anchor_default"] > 0.5 * n_ratio / 4
    return out


SCHEMA = {"fields": "str", "method": "str", "grid": "int", "points": "int", "logit_var": "float",
          "logit_abs_mean": "float", "var_ratio_to_coarsest": "float"}
PARAMS = {"sizes": [32, 64, 128, 256]}
QUICK = {"sizes": [32, 64]}


def run(params: dict) -> list[dict]:
    return measure([int(n) for n in params["sizes"]])


def table(records: list[dict]) -> str:
    """Logit variance per grid (columns) for each fields / method, and the last-to-first ratio."""
    from .harness import format_value

    rows = [r["row"] for r in records]
    sizes = sorted({r["grid"] for r in rows})
    lines = ["| fields | method | " + " | ".join(f"{n}²" for n in sizes) + f" | var({sizes[-1]}²)/var({sizes[0]}²) |",
             "|---|---|" + "---|" * (len(sizes) + 1)]
    keys = list(dict.fromkeys((r["fields"], r["method"]) for r in rows))
    for fam, method in keys:
        by = {r["grid"]: r for r in rows if (r["fields"], r["method"]) == (fam, method)}
        lines.append(f"| {fam} | {method} | " + " | ".join(format_value(by[n]["logit_var"]) for n in sizes)
                     + f" | {format_value(by[sizes[-1]]['var_ratio_to_coarsest'])} |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    rows = [r["row"] for r in records]
    sizes = sorted({r["grid"] for r in rows})
    return (f"Variance of the attention logits before the softmax; the same smooth fields (B={B}, V={V} variables × "
            f"C={C} channels; periodic: trigonometric polynomials with |k| ≤ {KMAX}; nonperiodic: cubic polynomials "
            f"times exp(x−y)) at the uniform nodes of each grid; one layer per method with fixed weights (seed {SEED}), "
            f"spectral modes {MODES}. Points grow ×{(sizes[-1] / sizes[0]) ** 2:g} from {sizes[0]}² to {sizes[-1]}². "
            "`ours`: quadrature-weighted scores (sciattn.codomain). `anchor`: neuralop CODALayer, one token per "
            "variable, Q/K at full resolution. `anchor_default`: CODALayer defaults (one token per channel, Q/K at "
            "half resolution, so its inner products see N/4 points). The anchor's logits are the input of `F.softmax` "
            "in `CODALayer.compute_attention`, captured by swapping the module-level name `F` for a recording proxy "
            "(no change to its maths).\n\nVerdict: " + "; ".join(f"{k}: {'yes' if v else 'no'}"
                                                       for k, v in verdict(rows).items()) + ".")


BENCHMARKS = module_benchmarks(
    globals(), packages=("neuraloperator",), plot=("points", "var_ratio_to_coarsest", "method"), log_axes=(True, True),
    description="Codomain-attention logit variance under grid refinement, sciattn against neuraloperator's CODALayer;",
    claim="the quadrature-weighted logits keep their variance under refinement, the anchor's grow with N "
          "(docs/benchmarks/codano.md)",
)
