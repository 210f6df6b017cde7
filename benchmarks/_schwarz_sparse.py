"""Diagnostic (not a harness benchmark): ``schwarz_transformer``'s training step with the local Schwarz sums over
each subdomain's own points (the default) against the dense form over every (point, subdomain) pair, side by side.

The operator at the standard protocol's parameter target (widths as ``standard_protocol_scaling`` matches them, on
Darcy's one-channel input), batch 1, one thread: one step (forward, relative-L2 loss, backward, AdamW) on an
``r × r`` grid of random inputs, alternately with :data:`sciattn.multipole.schwarz.SPARSE_BELOW` at its value and
below 0 (every call dense), the same model and inputs; each time is the median of ``--reps`` wall times after one
warm-up per form. The outputs of the two forms are compared (the same sums grouped differently).

Usage: ``python benchmarks/_schwarz_sparse.py [--sizes 32 64 128 256] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import sciattn.multipole.schwarz as schwarz
    from benchmarks import standard_protocol as sp
    from sciattn.train.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(sp.run_config(sp.resolved_params({"budget": "quick", "dataset": "darcy85",
                                                        "out": tempfile.mkdtemp()}), "fno", {}, 0))
    train, c_out = sp._channels(cfg)
    width, n_params = sp.match_width("schwarz_transformer", cfg, train, c_out, 100_000)
    torch.manual_seed(0)
    model = sp.build_model("schwarz_transformer", cfg, train, c_out, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # a step that leaves the weights as they are
    sparse = schwarz.SPARSE_BELOW
    print(f"schwarz_transformer, {n_params:,} parameters, batch 1, 1 thread")
    print(f"{'r':>5} {'dense ms':>10} {'sparse ms':>10} {'speed-up':>9} {'max rel diff':>13}")
    for r in args.sizes:
        b = sp._step_inputs(False, 1, r)
        times: dict[float, list[float]] = {sparse: [], -1.0: []}
        outs = {}
        for rep in range(args.reps + 1):
            for mode in times:
                schwarz.SPARSE_BELOW = mode
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                pred = model(b["x"])
                ((pred - b["y"]).norm() / b["y"].norm()).backward()
                opt.step()
                if rep:
                    times[mode].append(time.perf_counter() - t0)
                outs[mode] = pred.detach()
        schwarz.SPARSE_BELOW = sparse
        dense_ms, sparse_ms = (1e3 * statistics.median(times[m]) for m in (-1.0, sparse))
        diff = float((outs[sparse] - outs[-1.0]).abs().max() / outs[-1.0].abs().max())
        print(f"{r:>5} {dense_ms:>10.1f} {sparse_ms:>10.1f} {dense_ms / sparse_ms:>8.2f}x {diff:>13.1e}")


if __name__ == "__main__":
    main()
