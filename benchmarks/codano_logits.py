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

    python benchmarks/codano_logits.py [--sizes 32 64 128 256]

Writes benchmarks/results/codano_logits.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import itertools
import json
import math
import platform
import types
from pathlib import Path

import torch

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    args = parser.parse_args()
    import neuralop

    coda_layer, layers = build()
    rows = []
    with torch.no_grad():
        for family in FAMILIES:
            for n in args.sizes:
                x = smooth_fields(n, family)
                for name, layer in layers.items():
                    s = logits(name, layer, coda_layer, x)
                    rows.append({"fields": family, "method": name, "grid": n, "points": n * n,
                                 "logit_var": s.var().item(), "logit_abs_mean": s.abs().mean().item(),
                                 "shape": list(s.shape)})
    base = {(r["fields"], r["method"]): r["logit_var"] for r in rows if r["grid"] == args.sizes[0]}
    for r in rows:
        r["var_ratio_to_coarsest"] = r["logit_var"] / base[r["fields"], r["method"]]
    last = {(r["fields"], r["method"]): r["var_ratio_to_coarsest"] for r in rows if r["grid"] == args.sizes[-1]}
    n_ratio = (args.sizes[-1] / args.sizes[0]) ** 2
    verdict = {}
    for family in FAMILIES:
        verdict[f"{family}: ours change < 10%"] = abs(last[family, "ours"] - 1) < 0.10
        verdict[f"{family}: ours_pointwise change < 10%"] = abs(last[family, "ours_pointwise"] - 1) < 0.10
        verdict[f"{family}: anchor grows with N"] = last[family, "anchor"] > 0.5 * n_ratio
        verdict[f"{family}: anchor_default grows with N"] = last[family, "anchor_default"] > 0.5 * n_ratio / 4
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "neuralop": getattr(neuralop, "__version__", "unknown"),
        "command": "python benchmarks/codano_logits.py --sizes " + " ".join(str(s) for s in args.sizes),
        "setup": {"batch": B, "variables": V, "channels_per_variable": C, "max_frequency": KMAX, "fields": FAMILIES,
                  "n_modes": MODES, "seed": SEED, "heads": 1},
        "capture": "anchor logits = input of F.softmax in CODALayer.compute_attention, captured by swapping "
                   "the module-level name F for a recording proxy (no change to its maths)",
    }
    result = {"meta": meta, "rows": rows, "verdict": verdict}
    text = json.dumps(result, indent=2)
    print(text)
    lines = [
        f"Variance of attention logits before the softmax; the same smooth fields (B={B}, V={V} variables × "
        f"C={C} channels; periodic: trigonometric polynomials with |k| ≤ {KMAX}; nonperiodic: cubic polynomials "
        f"times exp(x−y)) sampled at the uniform nodes of each grid; one layer per method with fixed weights (seed {SEED}), "
        f"spectral modes {MODES}. {meta['date']}, {meta['machine']}, torch {meta['torch']}, neuralop "
        f"{meta['neuralop']}. Command: `{meta['command']}`.",
        "",
        "| fields | method | " + " | ".join(f"{n}²" for n in args.sizes)
        + f" | var({args.sizes[-1]}²)/var({args.sizes[0]}²) |",
        "|---|---|" + "---|" * (len(args.sizes) + 1),
    ]
    for family in FAMILIES:
        for name in layers:
            vals = [r["logit_var"] for r in rows if r["method"] == name and r["fields"] == family]
            lines.append(f"| {family} | {name} | " + " | ".join(f"{v:.4g}" for v in vals)
                         + f" | {last[family, name]:.4g} |")
    lines += [
        "",
        f"Points grow ×{n_ratio:g} from {args.sizes[0]}² to {args.sizes[-1]}². `ours`: quadrature-weighted scores "
        "(sciattn.codomain). `anchor`: neuralop CODALayer, one token per variable, Q/K at full resolution. "
        "`anchor_default`: CODALayer defaults (one token per channel, Q/K at half resolution, so its "
        "inner products see N/4 points).",
        "",
        "How the anchor's logits were read: " + meta["capture"] + ".",
        "",
        "Verdict: " + ", ".join(f"{k}={v}" for k, v in verdict.items()) + ".",
    ]
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "codano_logits.json").write_text(text + "\n")
    (out / "codano_logits.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
