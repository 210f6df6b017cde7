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

from . import standard_protocol  # noqa: E402

register(Benchmark(
    name="standard_protocol", run=standard_protocol.run, schema=standard_protocol.SCHEMA,
    params=standard_protocol.PARAMS, quick=standard_protocol.QUICK, columns=standard_protocol.COLUMNS,
    labels=standard_protocol.LABELS, notes=standard_protocol.notes,
    description="Standard protocol (issue 24): every registered operator and FNO through train_run on the same "
                "data, seeds and budget, widths matched to one parameter target;",
    claim="Transolver and LinearNO below the Galerkin Transformer and FNO at equal parameters; 2x zero-shot within "
          "1.5x (docs/benchmarks.md)",
))
register(Benchmark(
    name="standard_protocol_scaling", run=standard_protocol.scaling, schema=standard_protocol.SCALING_SCHEMA,
    params=standard_protocol.SCALING_PARAMS, quick=standard_protocol.SCALING_QUICK,
    columns=standard_protocol.SCALING_COLUMNS, labels=standard_protocol.SCALING_LABELS,
    notes=standard_protocol.scaling_notes,
    description="Milliseconds per training step (batch 1, forward + backward + AdamW) against N = r² per operator, "
                "widths matched to one parameter target;",
    claim="time per step grows at most like N^1.15 except quadratic baselines (docs/benchmarks.md)",
))

from . import refinement  # noqa: E402

register(Benchmark(
    name="refinement", run=refinement.run, schema=refinement.SCHEMA, params=refinement.PARAMS, quick=refinement.QUICK,
    columns=refinement.COLUMNS, labels=refinement.LABELS, notes=refinement.notes,
    description="Point-set operator on nested graded point sets under refinement, quadrature weights against the "
                "published uniform average;",
    claim="quadrature weights converge to the continuum value, the uniform average keeps a bias "
          "(docs/operators/transolver.md, linear_no.md, ono.md, gnot.md, oformer.md)",
    plot=("points", "vs_continuum", "rule"), log_axes=(True, True),
))

from . import burgers_match  # noqa: E402

register(Benchmark(
    name="burgers_match", run=burgers_match.run, schema=burgers_match.SCHEMA, params=burgers_match.PARAMS,
    quick=burgers_match.QUICK, columns=burgers_match.COLUMNS, labels=burgers_match.LABELS, notes=burgers_match.notes,
    description="Burgers generators against neuraloperator's burgers_{train,test}_16.pt (energy decay, mode energies);",
    claim="the matched generator (preset neuralop_burgers) passes the file checks, the FNO regime does not (docs/data.md)",
))

from . import codano_logits  # noqa: E402

register(Benchmark(
    name="codano_logits", run=codano_logits.run, schema=codano_logits.SCHEMA, params=codano_logits.PARAMS,
    quick=codano_logits.QUICK, table=codano_logits.table, notes=codano_logits.notes, packages=("neuraloperator",),
    description="Codomain-attention logit variance under grid refinement, sciattn against neuraloperator's CODALayer;",
    claim="the quadrature-weighted logits keep their variance under refinement, the anchor's grow with N "
          "(docs/benchmarks.md)",
    plot=("points", "var_ratio_to_coarsest", "method"), log_axes=(True, True),
))

from . import convergence  # noqa: E402

register(Benchmark(
    name="convergence", run=convergence.run, schema=convergence.SCHEMA, params=convergence.PARAMS,
    quick=convergence.QUICK, columns=convergence.COLUMNS, labels=convergence.LABELS, notes=convergence.notes,
    description="Every grid operator of the registry at its defaults under grid refinement, e_n against a finer "
                "reference grid;",
    claim="every grid operator at its defaults is discretisation-convergent: e128 ≤ 0.6·e64 and ≤ 5% "
          "(docs/concepts/convergence.md)",
))
