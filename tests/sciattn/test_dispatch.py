"""Backend dispatch: selection by declared capabilities and the refusal report."""

from __future__ import annotations

import pytest
import torch

import sciattn
from sciattn._dispatch import _REGISTRY, Backend, BackendError, register_backend, select_backend
from sciattn.galerkin._cpu import unavailable as galerkin_cpu_unavailable


@pytest.fixture
def fake_gpu_backend():
    backend = register_backend(Backend(op="galerkin", name="fake_cuda", fn=lambda *a: None, priority=10,
                                       devices=("cuda",), dtypes=(torch.float16,), max_head_dim=8))
    yield backend
    _REGISTRY["galerkin"] = [b for b in _REGISTRY["galerkin"] if b.name != "fake_cuda"]


def _props(**kw):
    p = dict(device=torch.device("cpu"), dtype=torch.float32, head_dim=16, has_mask=False, has_weights=False)
    p.update(kw)
    return p


def test_automatic_choice_skips_backends_that_do_not_fit(fake_gpu_backend):
    # fake_cuda (priority 10) cannot run; cpu (6, the fused C++ kernels) runs wherever they build, else chunked (5)
    expected = "chunked" if galerkin_cpu_unavailable() is not None else "cpu"
    assert select_backend("galerkin", None, **_props()).name == expected
    assert select_backend("galerkin", None, **_props(dtype=torch.float16)).name == "reference"  # nor can those two


def test_galerkin_cpu_switched_off_falls_back_to_chunked(monkeypatch):
    monkeypatch.setenv("SCIATTN_CPU_KERNELS", "0")
    assert select_backend("galerkin", None, **_props()).name == "chunked"
    with pytest.raises(BackendError, match="SCIATTN_CPU_KERNELS"):
        select_backend("galerkin", "cpu", **_props())


def test_forced_backend_that_does_not_fit_lists_every_reason(fake_gpu_backend):
    with pytest.raises(BackendError) as info:
        select_backend("galerkin", "fake_cuda", **_props())
    msg = str(info.value)
    assert "fake_cuda: device cpu not in ('cuda',)" in msg
    assert "dtype torch.float32 not in ('torch.float16',)" in msg
    assert "head dim 16 > 8" in msg
    assert "reference: ok" in msg


def test_available_backends_reports_the_reference(capsys):
    rows = sciattn.available_backends()
    assert {"op": "galerkin", "backend": "reference"}.items() <= rows[-1].items() or any(
        r["backend"] == "reference" and r["available"] == "yes" for r in rows
    )
    assert "| galerkin | reference |" in capsys.readouterr().out


def test_unknown_op_is_an_error():
    with pytest.raises(ValueError, match="op: expected one of"):
        select_backend("no_such_op", None, **_props())


def _fresh(code: str) -> str:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_registry_does_not_depend_on_import_order():
    # Importing a submodule imports the package first; the op list must be the same whichever
    # module a fresh interpreter reaches the registry through, and include every family.
    via_top = _fresh("import sciattn; print(sorted({r['op'] for r in sciattn.available_backends(False)}))")
    via_leaf = _fresh("from sciattn._backend_registry import registered_ops; print(registered_ops())")
    assert via_top == via_leaf
    ops = eval(via_top)
    assert {"galerkin", "weighted_softmax", "neighborhood", "multipole", "codomain", "ball"} <= set(ops)
    assert "window" not in ops


def test_registry_and_dispatch_modules_import_no_family():
    import ast
    from pathlib import Path

    families = {"balltree", "codomain", "galerkin", "multipole", "neighborhood", "spherical", "weighted_softmax"}
    root = Path(sciattn.__file__).parent
    for name in ("_backend_registry.py", "_dispatch.py", "_capabilities.py", "_checks.py"):
        tree = ast.parse((root / name).read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                imported |= {(node.module or "").split(".")[0]} | {a.name for a in node.names if not node.module}
        assert not imported & families, f"{name} imports {sorted(imported & families)}"


def test_multipole_is_the_op_name_and_window_a_deprecated_alias():
    from sciattn._dispatch import backends_for

    assert [b.name for b in backends_for("multipole")] == ["sdpa", "flex", "reference"]
    with pytest.warns(DeprecationWarning, match="'window' is deprecated, use 'multipole'"):
        old = select_backend("window", "reference", **_props(head_dim=4))
    assert old is select_backend("multipole", "reference", **_props(head_dim=4))


def test_multipole_layer_is_exported_with_the_other_families():
    from sciattn.multipole import MultipoleAttention

    assert sciattn.MultipoleAttention is MultipoleAttention
    assert "MultipoleAttention" in sciattn.__all__


def test_a_costly_probe_runs_only_for_inputs_the_backend_fits():
    """The fused CPU kernels' probe builds their library: CUDA or half-precision inputs never call it, CPU fp32
    inputs do, and its reason is reported then."""
    from sciattn._backend_registry import cpu_kernel_backend

    calls = []

    def probe():
        calls.append(1)
        return "no compiler"

    backend = cpu_kernel_backend("galerkin", lambda *a: None, priority=0, probe=probe)
    props = dict(head_dim=8, has_mask=False, has_weights=False)
    assert backend.reasons_against(device=torch.device("cuda"), dtype=torch.float32, **props) == \
        ["device cuda not in ('cpu',)"]
    assert "dtype" in backend.reasons_against(device=torch.device("cpu"), dtype=torch.float16, **props)[0]
    assert calls == []
    assert backend.reasons_against(device=torch.device("cpu"), dtype=torch.float32, **props) == ["no compiler"]
    assert calls == [1]
