"""Every C++ source of the fused CPU kernels ships with the package: a wheel built without one would leave its
family on the slower PyTorch path (the kernels are compiled from these files on first use)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_kernel_source_is_in_the_package_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = config["package-data"]
    sources = sorted(p for p in (REPO / "sciattn").rglob("csrc/*") if p.suffix in (".cpp", ".h"))
    assert sources, "no kernel sources found under sciattn/"
    missing = []
    for path in sources:
        package = ".".join(path.parent.parent.relative_to(REPO).parts)
        patterns = data.get(package, [])
        if not any(fnmatch.fnmatch(f"csrc/{path.name}", pattern) for pattern in patterns):
            missing.append(f"{path.relative_to(REPO)} (package {package}: {patterns})")
    assert not missing, "kernel sources missing from [tool.setuptools.package-data]: " + "; ".join(missing)
