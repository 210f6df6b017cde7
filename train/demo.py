"""``sciattn demo``: Darcy flow from the built-in solver, a Galerkin Transformer trained at 32×32
on the CPU, evaluated zero-shot at 32, 64 and 128.

All samples are solved once at 128×128 and restricted, so the test sets at the three
resolutions hold the same fields. The model runs its attention on a 32×32 latent grid, as Cao's
2-D model does on its coarse grid: finer inputs are restricted onto it and the band-limited
regressor output is evaluated on the input grid through its Fourier series, so the zero-shot
error at 128 measures how well that smooth output represents the solution between the nodes.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from .config import load_config
from .training.run import train_run

__all__ = ["DEMO_CONFIG", "run_demo"]

#: the demo's config (``train/demo.toml``, shipped with the package; ``examples/configs/darcy32_demo.toml`` is the same)
DEMO_CONFIG = (resources.files(__package__) / "demo.toml").read_text()


def run_demo(out: str | Path = "sciattn-demo", overrides: list[str] | None = None, progress: bool = True,
             log=print) -> dict[str, Any]:
    cfg = load_config(tomllib.loads(DEMO_CONFIG), overrides)
    metrics = train_run(cfg, out, progress=progress, log=log)
    errs = metrics["rel_l2_by_resolution"]
    train_res = str(cfg.data.train_res)
    log("")
    log("| resolution | relative L2 | ratio to training resolution |")
    log("|---|---|---|")
    for r, e in errs.items():
        log(f"| {r} | {e:.4f} | {e / errs[train_res]:.2f} |")
    log(f"\nwrote {Path(out) / 'metrics.json'} and PNG figures to {Path(out)}")
    return metrics
