"""Diagnostic (not a harness benchmark): one level of the multipole layer through the shared-box CPU kernel with the
box tables as the level gives them against the widened boxes that runs of queries share
(:data:`sciattn.multipole.box_attention.WIDEN_CELLS`, :func:`sciattn.multipole.geometry.widened_axis_geometry`), the
measurement behind ``WIDEN_BELOW`` and ``WIDEN_CELLS``.

Each case is an input of ``n × n`` cells against a level of ``m × m`` key cells with 8-cell tapered windows, 4 heads
of 14 channels (``mano``'s width 56), fp32, one thread; the kernel's forward and backward are called directly
(``boxes_forward`` / ``boxes_backward``) on the same inputs with the plain and the widened tables, alternately,
and each time is the median of ``--reps`` thread-CPU times. Every case is widened here, whatever the rule; the
mean run (queries per distinct box start, which the rule compares with ``WIDEN_BELOW``) is printed beside the
ratio, and the outputs of the two are compared (they are the same sums in another order).

With ``--fold``: the other measurement of the same kind, a level finer than the input (the 64-cell level under
inputs below 64²) run on its own key grid (keys pooled there by repetition) against the same level folded onto
the input grid (``box_attention(..., key_grid=)``, :func:`sciattn.multipole.geometry.folded_axis_geometry`), through
``box_attention`` forward and backward, alternately in one process.

Usage: ``python benchmarks/_box_widening.py [--extra 3] [--reps 5] [--fold]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

CASES = [  # (n, m, batch)
    (85, 64, 8), (141, 64, 2), (85, 32, 8), (211, 64, 1), (300, 64, 1), (141, 32, 2), (421, 64, 1),
    (32, 16, 16), (64, 16, 8), (85, 16, 8), (100, 16, 4), (256, 16, 1), (512, 64, 1),
]


def main() -> None:
    import torch

    from sciattn.multipole import box_attention as ba
    from sciattn.multipole.geometry import box_starts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, default=ba.WIDEN_CELLS)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--fold", action="store_true", help="time folded against unfolded fine levels instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.fold:
        return _fold(args.reps)
    lib = ba._library()
    h, d, window = 4, 14, (8, 8)
    print(f"{'n':>5} {'m':>4} {'B':>3} {'mean run':>9} {'plain ms':>9} {'widened ms':>11} {'speed-up':>9} {'max diff':>9}")
    for n, m, b in CASES:
        torch.manual_seed(0)
        q, k, v = torch.randn(b, h, d, n * n), torch.randn(b, h, d, m * m), torch.randn(b, h, d, m * m)
        logw, grad = torch.zeros(b, m * m), torch.randn(b, h, d, n * n)
        tables = {}
        for label, extra in (("plain", 0), ("widened", args.extra)):
            saved = ba.WIDEN_CELLS, ba.WIDEN_BELOW
            ba.WIDEN_CELLS, ba.WIDEN_BELOW = extra, float("inf")  # every case widened, whatever the rule says
            try:
                n3, m3, starts, logphi, (a, _), _ = ba._geometry((n, n), (m, m), window, True, q.dtype, q.device)
            finally:
                ba.WIDEN_CELLS, ba.WIDEN_BELOW = saved
            if a:
                raise SystemExit(f"n={n}, m={m}: the level takes the query-lane kernel, not the shared boxes")
            tables[label] = (n3, m3, starts, logphi)
        times = {label: [] for label in tables}
        outs = {}
        for _ in range(args.reps):
            for label, (n3, m3, starts, logphi) in tables.items():
                out, lse = torch.empty_like(q), q.new_empty(b, h, n * n)
                dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
                t0 = time.thread_time()
                lib.boxes_forward(q, k, v, logw, n3, m3, starts, logphi, 0.25, None, [], out, lse, None)
                lib.boxes_backward(q, k, v, logw, n3, m3, starts, logphi, 0.25, None, [], out, lse, grad, dq, dk, dv, None,
                                   None)
                times[label].append(time.thread_time() - t0)
                outs[label] = out
        plain, wide = (1e3 * statistics.median(times[x]) for x in ("plain", "widened"))
        run = n / box_starts(n, m, window[0], True)
        diff = (outs["plain"] - outs["widened"]).abs().max().item()
        print(f"{n:>5} {m:>4} {b:>3} {run:>9.1f} {plain:>9.1f} {wide:>11.1f} {plain / wide:>8.2f}x {diff:>9.1e}",
              flush=True)


FOLD_CASES = [(32, 64, 16), (28, 64, 8), (16, 64, 16), (40, 64, 8)]  # (n, m, batch)


def _fold(reps: int) -> None:
    import torch

    from sciattn.multipole import box_attention as ba
    from sciattn.multipole.physical import pool_to_grid

    h, d, window = 4, 14, (8, 8)
    print(f"{'n':>4} {'m':>4} {'B':>3} {'unfolded ms':>12} {'folded ms':>10} {'speed-up':>9} {'max diff':>9}")
    for n, m, b in FOLD_CASES:
        torch.manual_seed(0)
        x = torch.randn(b, 2 * h * d, n, n)
        w = torch.ones(b, n, n)
        q = torch.randn(b, h, d, n, n, requires_grad=True)
        cases = {}
        for label, grid, key_grid in (("unfolded", (m, m), None), ("folded", (n, n), (m, m))):
            xm, wm = pool_to_grid(x, w, grid)
            k, v = (t.contiguous().requires_grad_() for t in xm.view(b, 2, h, d, *grid).unbind(1))
            cases[label] = (k, v, wm.log(), key_grid)
        times = {label: [] for label in cases}
        outs = {}
        for _ in range(reps):
            for label, (k, v, logw, key_grid) in cases.items():
                t0 = time.thread_time()
                out = ba.box_attention(q, k, v, logw, window, 0.25, taper=True, backend="cpu", key_grid=key_grid)
                out.square().sum().backward()
                times[label].append(time.thread_time() - t0)
                outs[label] = out.detach()
        un, fo = (1e3 * statistics.median(times[x]) for x in ("unfolded", "folded"))
        diff = (outs["unfolded"] - outs["folded"]).abs().max().item()
        print(f"{n:>4} {m:>4} {b:>3} {un:>12.1f} {fo:>10.1f} {un / fo:>8.2f}x {diff:>9.1e}", flush=True)


if __name__ == "__main__":
    main()
