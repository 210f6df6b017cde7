"""FactFormer's bare axial sum under grid refinement: our quadrature-weighted kernel against the published one.

The published axial kernel sums over each axis without ``1/n`` (Pattern C), so the kernel integral ``Ṽ`` grows like
``N = n_1 n_2``; the GroupNorm that follows is scale-invariant, so the published block equals ours with GroupNorm's
eps divided by ``N²``. Where the variance of ``Ṽ`` is not far above eps (at the published initialisation it is far
below), that eps is resolution-dependent and so is the output. This script measures, at initialisation and with
the q/k projections redrawn wider (std ``--qk-std``, a trained-like kernel), the relative difference between the
output on ``n²`` cells (``n = 32, 64, 128``) and the cell means of the output on ``256²`` cells (the metric of
``tests/operators/test_discretisation_convergence.py``), for ours (eps 1e-8 on the weighted ``Ṽ``) and the
published layer (emulated exactly: eps ``1e-8 / N²``).

    python benchmarks/factformer_kernel_refinement.py [--seed 0] [--qk-std 0.05]

Writes rows (date, hardware, versions, command) to ``benchmarks/results/factformer_kernel_refinement.json`` and the
table ``factformer_kernel_refinement.md`` generated from them.
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
    t = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    axes = torch.meshgrid(t, t, indexing="ij")
    u = sum(math.sin(1.0 + a) * torch.sin(2 * math.pi * (a + 1) * x + a) for a, x in enumerate(axes))
    return (u + math.prod(torch.cos(2 * math.pi * x) for x in axes))[None, None].float()


def restrict(y: torch.Tensor, n: int) -> torch.Tensor:
    r = y.shape[-1] // n
    return y.reshape(*y.shape[:2], n, r, n, r).mean((3, 5))


@torch.no_grad()
def measure(seed: int, qk_std: float | None, published: bool) -> dict[str, float]:
    torch.manual_seed(seed)
    model = create_operator("factformer", in_channels=1, out_channels=1).float().eval()
    if qk_std is not None:
        for name, p in model.named_parameters():
            if name.endswith((".q.weight", ".k.weight")):
                p.normal_(0, qk_std)

    def run(n):
        for block in model.blocks:
            block.norm_eps = 1e-8 / (n * n) ** 2 if published else 1e-8
        return model(smooth(n))

    ref = run(REFERENCE)
    out = {}
    for n in SIZES:
        r = restrict(ref, n)
        out[str(n)] = float((run(n) - r).norm() / r.norm())
    return out


def markdown(result: dict) -> str:
    lines = [f"Command: `{result['command']}`; {result['date']}, {result['hardware']}, torch {result['torch']}, "
             f"{result['threads']} torch threads, {result['seconds']:.0f} s.", "",
             f"`factformer` at its defaults (seed {result['seed']}); relative L2 difference of the output to the cell "
             f"means of the {REFERENCE}² output.", "",
             "| q/k weights | kernel | " + " | ".join(f"{n}²" for n in SIZES) + " |", "|---|---|" + "---|" * len(SIZES)]
    for row in result["rows"]:
        lines.append(f"| {row['init']} | {row['kernel']} | " + " | ".join(f"{row['errors'][str(n)]:.2e}" for n in SIZES)
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--qk-std", type=float, default=0.05)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    rows = []
    for init, std in (("published init (xavier, gain 0.02)", None), (f"redrawn, std {args.qk_std:g}", args.qk_std)):
        for kernel, published in (("quadrature (ours)", False), ("bare sum (published)", True)):
            rows.append({"init": init, "kernel": kernel, "errors": measure(args.seed, std, published)})
    result = {"date": datetime.date.today().isoformat(),
              "hardware": f"{platform.machine()} {platform.processor() or ''}".strip(), "torch": torch.__version__,
              "python": platform.python_version(), "threads": torch.get_num_threads(),
              "command": "python benchmarks/factformer_kernel_refinement.py " + " ".join(sys.argv[1:] if argv is None
                                                                                      else argv),
              "seed": args.seed, "qk_std": args.qk_std, "seconds": time.perf_counter() - started, "rows": rows}
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "factformer_kernel_refinement.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.results / "factformer_kernel_refinement.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
