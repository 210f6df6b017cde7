"""The repository's registered benchmarks (imported by :func:`benchmarks.harness.get`).

Each entry names the function that runs it; the heavy imports happen inside those functions, so
``python -m benchmarks list`` is quick."""

from __future__ import annotations

from . import startup
from .harness import Benchmark, register

register(Benchmark(
    name="startup", run=startup.run, schema=startup.SCHEMA, params=startup.PARAMS, quick=startup.QUICK,
    description="Start-up time in a fresh interpreter (median of the repeats), against plain `import torch`;",
    claim="import sciattn.train does not import neuraloperator (docs/install.md)",
))

from . import darcy16_sweep  # noqa: E402

register(Benchmark(
    name="darcy16_sweep", run=darcy16_sweep.run, schema=darcy16_sweep.SCHEMA, params=darcy16_sweep.PARAMS,
    quick=darcy16_sweep.QUICK, columns=darcy16_sweep.COLUMNS, notes=darcy16_sweep.notes, labels=darcy16_sweep.LABELS,
    description="Galerkin Transformer trained on neuraloperator's darcy_train_16.pt through the CLI, swept at "
                "16 / 32 / 64 on matched data;",
    claim="the sweep is invariant within 1.5x (README, docs/cli.md)", plot=("resolution", "rel_l2", None),
    log_axes=(True, False),
))
