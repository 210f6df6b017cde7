"""The small training loop the generated-problem benchmarks share (anie_integral_equation, schwarz_diffusion_1d)."""

from __future__ import annotations

import time
from typing import Any


def fit_relative_l2(model, x, y, params: dict[str, Any]) -> tuple[int, float]:
    """Trains ``model`` on ``x -> y`` in place: ``params["epochs"]`` epochs of shuffled batches of ``params["batch"]``
    (the last partial batch dropped), Adam at ``params["lr"]`` with a cosine schedule, the mean relative L2 loss,
    shuffles seeded by ``params["seed"]``. Returns ``(steps, seconds)``; the model is left in eval mode."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=params["lr"])
    steps = params["epochs"] * (len(x) // params["batch"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1))
    gen = torch.Generator().manual_seed(params["seed"])
    start = time.perf_counter()
    model.train()
    for _ in range(params["epochs"]):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x) - params["batch"] + 1, params["batch"]):
            idx = perm[i:i + params["batch"]]
            pred = model(x[idx])
            loss = ((pred - y[idx]).flatten(1).norm(dim=1) / y[idx].flatten(1).norm(dim=1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    seconds = time.perf_counter() - start
    model.eval()
    return steps, seconds
