"""Under CI the upstream oracles must be installed, so their equivalence tests cannot silently skip.

The torch-harmonics tests (tests/sciattn/test_spherical_attention.py, tests/pde_data/test_sht.py) and
the balltree-erwin tests (tests/sciattn/test_balltree_tree.py) use ``pytest.importorskip``, which is
right for a local user without the packages. ``.ci/run`` installs both and sets ``CI=true``; with
``CI`` set to a true value this test fails, naming the missing package and the install command,
instead of letting those tests skip. Locally (``CI`` unset or false) it skips.
"""

from __future__ import annotations

import importlib
import os

import pytest

#: module -> how .ci/run installs it
ORACLES = {
    "torch_harmonics": 'pip install --no-deps "torch-harmonics==0.9.3"',
    "balltree": 'pip install -e ".[oracle]"  (balltree-erwin)',
}


def ci_enabled(environ: dict[str, str] | None = None) -> bool:
    """True when ``CI`` is set to a true value (``true``/``1``/``yes``, any case), as CI services do."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() in ("true", "1", "yes")


def test_ci_enabled_reads_the_variable():
    assert ci_enabled({"CI": "true"}) and ci_enabled({"CI": "1"}) and ci_enabled({"CI": "TRUE"})
    assert not ci_enabled({}) and not ci_enabled({"CI": "false"}) and not ci_enabled({"CI": "0"})


@pytest.mark.parametrize("module", sorted(ORACLES))
def test_oracle_installed_under_ci(module):
    if not ci_enabled():
        pytest.skip("CI is not set: the oracle tests may skip locally")
    try:
        importlib.import_module(module)
    except ImportError as err:
        pytest.fail(
            f"{module}: CI=true but the upstream oracle is not importable ({err}); its equivalence tests "
            f"would skip. Install it with: {ORACLES[module]}"
        )
