"""``sciattn train`` for several configs in one ``torchrun`` launch (the quick path of
test_torchrun_configs.py): each rank imports once and joins the gloo group once, then runs the
CLI's ``main(["train", ...])`` per config, as ``python -m sciattn.train.cli`` would under torchrun
(``train_run`` finds the group initialised and leaves it alone).

Usage: ``torchrun --nproc-per-node 2 _torchrun_many.py SPEC.json``; SPEC is a list of
``{"name", "config", "out", "sets"}``. Rank 0 prints ``@@ <name> rc=<code> seconds=<s>`` per config,
with ``rc`` the largest return code over the ranks (an exception counts as 1); the launch stops
at the first failure (the ranks' collectives may no longer match after it).
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import torch
import torch.distributed as dist

from sciattn.train.cli import main


def run(spec_path: str) -> int:
    jobs = json.loads(open(spec_path).read())
    dist.init_process_group("gloo")  # env:// from torchrun
    rank = dist.get_rank()
    worst = 0
    try:
        for job in jobs:
            started = time.perf_counter()
            try:
                rc = main(["train", job["config"], "--out", job["out"], "--no-progress",
                           *[a for s in job["sets"] for a in ("--set", s)]])
            except Exception:  # e.g. DDP's RuntimeError on parameters unused in the loss
                traceback.print_exc()
                rc = 1
            agreed = torch.tensor([rc])
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            worst = int(agreed)
            if rank == 0:
                print(f"@@ {job['name']} rc={worst} seconds={time.perf_counter() - started:.1f}", flush=True)
            if worst:
                break
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return worst


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
