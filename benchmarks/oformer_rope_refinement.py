"""OFormer's rotary frequencies under grid refinement: our default ``rope_scales`` against the published ones.

The published encoder multiplies the coordinates by ``res·[res, res/4, 1, …]`` (``min_freq = 1/res``) before the
rotary embedding, up to ``res²`` radians per unit length. A kernel that oscillates that fast is not resolved by a
grid coarser than its frequency, so the quadrature ``Σ_j w_j k_jᵀ v_j`` does not converge until the grid resolves
it. This script measures, at initialisation (``torch.manual_seed(seed)``, eval, float32), the relative difference
between the output on ``n²`` cells (``n = 32, 64, 128``) and the cell means of the output on ``256²`` cells, the
metric of ``tests/operators/test_discretisation_convergence.py``, for

- the whole model's output, and
- each encoder layer's attention term ``GA_l(h)`` alone (the skip paths are pointwise and hide it),

with the default ``rope_scales`` and with the published ``res·[res, res/4, 1, 1]`` at ``res = 64`` (decoder scale 64).

    python benchmarks/oformer_rope_refinement.py [--res 64] [--seed 0]

Writes rows (date, hardware, versions, command) to ``benchmarks/results/oformer_rope_refinement.json`` and the
table ``oformer_rope_refinement.md`` generated from them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

from sciattn.operators import create_operator

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SIZES = (32, 64, 128)
REFERENCE = 256


def smooth(n: int) -> torch.Tensor:
    """The registry convergence test's input at the centres of ``n²`` cells, ``(1, 1, n, n)``."""
    t = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    axes = torch.meshgrid(t, t, indexing="ij")
    u = sum(math.sin(1.0 + a) * torch.sin(2 * math.pi * (a + 1) * x + a) for a, x in enumerate(axes))
    return (u + math.prod(torch.cos(2 * math.pi * x) for x in axes))[None, None].float()


def restrict(y: torch.Tensor, n: int) -> torch.Tensor:
    r = y.shape[-1] // n
    return y.reshape(*y.shape[:2], n, r, n, r).mean((3, 5))


@torch.no_grad()
def measure(config: dict, seed: int) -> dict:
    torch.manual_seed(seed)
    model = create_operator("oformer", in_channels=1, out_channels=1, **config).float().eval()
    captured: dict[int, torch.Tensor] = {}
    for i, layer in enumerate(model.layers):
        layer.attn.register_forward_hook(lambda mod, args, out, i=i: captured.__setitem__(i, out))

    def run(n):
        y = model(smooth(n))
        return {"output": y, **{f"attention {i}": captured[i].transpose(1, 2).reshape(1, -1, n, n)
                                for i in range(len(model.layers))}}

    ref = run(REFERENCE)
    out: dict[str, dict[str, float]] = {k: {} for k in ref}
    for n in SIZES:
        coarse = run(n)
        for k, v in coarse.items():
            r = restrict(ref[k], n)
            out[k][str(n)] = float((v - r).norm() / r.norm())
    return out


def markdown(result: dict) -> str:
    lines = [f"Command: `{result['command']}`; {result['date']}, {result['hardware']}, torch {result['torch']}, "
             f"{result['threads']} torch threads, {result['seconds']:.0f} s.", "",
             f"`oformer` at its defaults except `rope_scales` / `decoder_rope_scale` (seed {result['seed']}, "
             f"initialisation); relative L2 difference to the cell means of the {REFERENCE}² output.", "",
             "| rope_scales | decoder scale | quantity | " + " | ".join(f"{n}²" for n in SIZES) + " |",
             "|---|---|---|" + "---|" * len(SIZES)]
    for row in result["rows"]:
        scales = ", ".join(f"{s:g}" for s in row["rope_scales"])
        for k, errs in row["errors"].items():
            lines.append(f"| [{scales}] ({row['label']}) | {row['decoder_rope_scale']:g} | {k} | "
                         + " | ".join(f"{errs[str(n)]:.2e}" for n in SIZES) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--res", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    r = float(args.res)
    configs = [("default", dict()), ("published", dict(rope_scales=[r * r, r * r / 4, r, r], decoder_rope_scale=r))]
    rows = []
    for label, cfg in configs:
        model = create_operator("oformer", in_channels=1, out_channels=1, **cfg)
        scales = [layer.attn.rope_scale for layer in model.layers]
        rows.append({"label": label, "rope_scales": scales, "decoder_rope_scale": model.cross.rope_scale,
                     "errors": measure(cfg, args.seed)})
    result = {"date": datetime.date.today().isoformat(),
              "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(), "torch": torch.__version__,
              "python": platform.python_version(), "threads": torch.get_num_threads(),
              "command": "python benchmarks/oformer_rope_refinement.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "res": args.res, "seed": args.seed, "seconds": time.perf_counter() - started, "rows": rows}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "oformer_rope_refinement.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.results / "oformer_rope_refinement.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
