"""Diagnostic (not a harness benchmark): the cost of the relative-position bias in the multipole CPU kernels.

One level of the physical pyramid through :func:`sciattn.multipole.box_attention.box_attention` on the CPU kernels,
without a score bias and with a :class:`~sciattn.multipole.relative_bias.RelativePositionBias` (``R = 8``, the
``mano_extended`` default), alternately on the same inputs in one process: forward, then the backward of a random
projection of the output (with the table's gradient where there is a table). 4 heads of 8 channels (``mano_extended``'s
width 32), batch 16, fp32, one thread, 8-cell windows; each time is the median of ``--reps`` wall times. The cases
cover both kernels: queries in lanes (``(a, r)`` printed non-zero) and shared boxes (``(0, 0)``, widened at 85).

Usage: ``python benchmarks/_box_bias.py [--reps 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

CASES = [(32, 64, True), (32, 32, True), (32, 16, True), (32, 8, False), (64, 32, True), (85, 64, True),
         (128, 16, True)]  # (n, m, tapered)


def main() -> None:
    import torch

    from sciattn.multipole import box_attention as ba
    from sciattn.multipole.relative_bias import RelativePositionBias

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    b, h, d = 16, 4, 8
    print(f"{'n':>4} {'m':>4} {'(a, r)':>7} {'fwd ms':>8} {'biased':>8} {'ratio':>6} {'bwd ms':>8} {'biased':>8} "
          f"{'ratio':>6}")
    for n, m, taper in CASES:
        torch.manual_seed(0)
        q = torch.randn(b, h, d, n, n, requires_grad=True)
        k, v = torch.randn(b, h, d, m, m, requires_grad=True), torch.randn(b, h, d, m, m, requires_grad=True)
        logw, grad = torch.zeros(b, m, m), torch.randn(b, h, d, n, n)
        table = torch.randn(h, 17, 17, requires_grad=True)
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "bias": []}
        for rep in range(args.reps + 1):  # the first round warms up (kernel build, geometry cache)
            for label, bias in (("plain", None), ("bias", RelativePositionBias(table, 8))):
                t0 = time.perf_counter()
                out = ba.box_attention(q, k, v, logw, (8, 8), 0.25, bias, taper=taper, backend="cpu")
                t1 = time.perf_counter()
                torch.autograd.grad((out * grad).sum(), (q, k, v) + (() if bias is None else (table,)))
                t2 = time.perf_counter()
                if rep:
                    times[label].append((t1 - t0, t2 - t1))
        med = {label: [1e3 * statistics.median(t[i] for t in times[label]) for i in (0, 1)] for label in times}
        a, r = ba._geometry((n, n), (m, m), (8, 8), taper, torch.float32, "cpu")[4]
        (fp, bp), (fb, bb) = med["plain"], med["bias"]
        print(f"{n:>4} {m:>4} {f'({a}, {r})':>7} {fp:>8.1f} {fb:>8.1f} {fb / fp:>5.2f}x {bp:>8.1f} {bb:>8.1f} "
              f"{bb / bp:>5.2f}x")


if __name__ == "__main__":
    main()
