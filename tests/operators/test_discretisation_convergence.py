"""Registry contract: every grid operator at its default configuration is discretisation-convergent.

The measurement is :func:`benchmarks.convergence.relative_errors` (one implementation, shared with
``python -m benchmarks run convergence``, whose rows docs/concepts/convergence.md shows).

Generated from :func:`sciattn.operators.list_operators`: an operator registered with ``input_kind="grid"`` is
covered as soon as it registers. For each one, at initialisation (``torch.manual_seed(0)``), in eval mode,
float32, batch 1, the constructor filled only with its required arguments (``REQUIRED``; an unknown required
argument fails with its name):

* a smooth input ``u(x) = Σ_c sin/cos products`` sampled at the cell centres of ``n`` cells per axis,
  ``n = 32, 64, 128`` and the reference ``256`` (2-D; 1-D likewise where the operator takes ``spatial_dims=1``);
* comparison at shared physical locations by restriction: the reference output is averaged over the
  ``(256 / n)^d`` fine cells inside each coarse cell (cell means of the finest discretisation, the quantity a
  cell-centred value approximates to second order for a smooth output), and
  ``e_n = ||y_n - R_n y_256|| / ||R_n y_256||`` (Frobenius over channels and cells);
* the contract: ``e_128 <= 0.6 e_64`` (at least first order) and ``e_128 <= 5%``.

Sphere and point-cloud operators are skipped here with the reason (their own convergence files cover them).
3-D is not run: at the defaults it is not cheap on one CPU thread. The heaviest 2-D cases (``SLOW_2D``) are
marked slow; measured at the defaults (2026-12-02, ``relative_errors``): galerkin_transformer e64 2.2%, e128
0.75%; codano 11.4%, 3.8%; mano 0.33%, 0.105%; mano_extended 0.73%, 0.31%.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.convergence import (  # the one implementation, shared with `python -m benchmarks run convergence`
    FIRST_ORDER,
    REFERENCE,
    TOLERANCE,
    MissingConvention,
    relative_errors,
)
from benchmarks.convergence import takes as _takes
from sciattn.operators import list_operators
from sciattn.operators.registry import operator_kind

# 2-D cases over ~10 s on one busy CPU thread (measured 2026-12-02: codano 10 s, mano_extended 26 s; mano 15 s,
# galerkin_transformer 4 s stay in the default run): marked slow, their 1-D cases run by default.
SLOW_2D = {"codano", "mano_extended"}


def _cases():
    out = []
    for name in list_operators():
        kind = operator_kind(name)
        for d in (2, 1):
            marks = ()
            if kind != "grid":
                marks = pytest.mark.skip(reason=f"{name!r} takes {kind} inputs, not grids: its own convergence "
                                                f"file covers refinement of {kind} discretisations")
            elif not _takes(name, d):
                continue
            elif d == 2 and name in SLOW_2D:
                marks = pytest.mark.slow
            out.append(pytest.param(name, d, marks=marks, id=f"{name}-{d}d"))
    return out


@pytest.mark.parametrize("name,spatial_dims", _cases())
def test_default_operator_converges_under_grid_refinement(name, spatial_dims):
    torch.set_num_threads(1)
    try:
        errs = relative_errors(name, spatial_dims)
    except MissingConvention as e:
        pytest.fail(str(e.args[0]))
    msg = (f"{name} ({spatial_dims}-D, defaults, init): relative difference to the {REFERENCE}-cell output "
           f"at shared cells {', '.join(f'e{n}={e:.4f}' for n, e in errs.items())}")
    assert errs[128] <= FIRST_ORDER * errs[64], msg + f"; expected e128 <= {FIRST_ORDER} e64 (first order)"
    assert errs[128] <= TOLERANCE, msg + f"; expected e128 <= {TOLERANCE}"
