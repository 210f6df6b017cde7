"""Diagnostic (not a harness benchmark): BSA's training step with its windows run all at once against run in bounded
chunks (:data:`sciattn.balltree.sparse.CHUNK_ELEMENTS`), each setting in a fresh process, with the minor page faults
per step (``getrusage``): the super-linear term of ``standard_protocol_scaling``'s ``bsa_transformer`` row.

The step is the harness's (:func:`benchmarks.standard_protocol.scaling`: the r × r grid's cell centres as a point set,
batch 1, one thread, width matched to 100,000 parameters, AdamW); "all at once" sets ``CHUNK_ELEMENTS`` so large that
every window runs in one call, which is the code before the chunks (the outputs are equal: see
``tests/sciattn/test_ball_sparse_chunks.py``). A fresh process per setting, since the allocator's state carries over.

Usage: ``OMP_NUM_THREADS=1 python benchmarks/_bsa_window_chunks.py [--sizes 128 256] [--reps 2] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ALL_AT_ONCE = 2**62


def _child(sizes: list[int], reps: int, chunk: int | None) -> None:
    import resource
    import tempfile
    import time

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the benchmarks package
    import sciattn.balltree.sparse as sparse
    from benchmarks.standard_protocol import (
        _channels,
        _step_inputs,
        build_model,
        match_width,
        resolved_params,
        run_config,
    )
    from sciattn.pde_data.normalizers import IdentityNormalizer
    from sciattn.train.config import load_config
    from sciattn.train.training.batching import predict

    torch.set_num_threads(1)
    if chunk is not None:
        sparse.CHUNK_ELEMENTS = chunk
    cfg = load_config(run_config(resolved_params({"budget": "quick", "dataset": "darcy_points",
                                                  "out": tempfile.mkdtemp()}), "fno", {}, 0))
    train, c_out = _channels(cfg)
    width, _ = match_width("bsa_transformer", cfg, train, c_out, 100_000)
    torch.manual_seed(0)
    model = build_model("bsa_transformer", cfg, train, c_out, width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ident = IdentityNormalizer()
    out = {}
    for r in sizes:
        b = _step_inputs(True, 1, r)

        def step(b=b):
            opt.zero_grad(set_to_none=True)
            pred = predict(model, b, ident, ident)
            ((pred - b["y"]).norm() / b["y"].norm()).backward()
            opt.step()

        step()
        best = None
        for _ in range(reps):
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            step()
            run = (time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            best = run if best is None or run[0] < best[0] else best
        out[r] = {"ms": 1e3 * best[0], "fault_mib": best[1] * resource.getpagesize() / 2**20}
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--reps", type=int, default=2, help="timed steps per size after a warm-up (the fastest is kept)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the two settings, alternating their order")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        _child(args.sizes, args.reps, args.child or None)
        return
    root = Path(__file__).resolve().parents[1]
    settings = {"all windows at once": ALL_AT_ONCE, "chunked (default)": 0}
    for k in range(args.rounds):
        for name in (list(settings) if k % 2 == 0 else list(settings)[::-1]):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(settings[name]), "--reps",
                   str(args.reps), "--sizes", *map(str, args.sizes)]
            res = json.loads(subprocess.run(cmd, cwd=root, check=True, stdout=subprocess.PIPE, text=True).stdout
                             .strip().splitlines()[-1])
            ms = [res[str(r)]["ms"] for r in args.sizes]
            exp = [math.log(ms[i + 1] / ms[i]) / math.log((args.sizes[i + 1] / args.sizes[i]) ** 2)
                   for i in range(len(ms) - 1)]
            print(f"round {k + 1}, {name}: " + ", ".join(
                f"{r}²: {res[str(r)]['ms']:.0f} ms, {res[str(r)]['fault_mib']:.0f} MiB faulted" for r in args.sizes)
                + "; exponents between sizes " + ", ".join(f"{e:.2f}" for e in exp), flush=True)


if __name__ == "__main__":
    main()
