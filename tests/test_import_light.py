"""`import sciattn` is light: it imports none of the heavy optional-looking dependencies, and
`import sciattn.train` does not import neuraloperator (imported where a spectral layer, a loss or a
Gaussian normaliser is built). Checked in a fresh interpreter, so nothing imported by other tests counts."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("neuralop", "torch_geometric", "xarray", "matplotlib", "h5py")


def _imported_after(statement: str) -> dict[str, bool]:
    code = f"import json, sys; {statement}; print(json.dumps({{m: m in sys.modules for m in {list(HEAVY)!r}}}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_sciattn_imports_no_heavy_dependency():
    loaded = _imported_after("import sciattn")
    assert not any(loaded.values()), f"import sciattn imported {[m for m, v in loaded.items() if v]}"


def test_import_sciattn_train_does_not_import_neuraloperator():
    loaded = _imported_after("import sciattn.train")
    assert not loaded["neuralop"], "import sciattn.train imported neuralop"
