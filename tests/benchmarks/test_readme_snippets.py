"""The README's Python examples marked ``<!-- snippet-test -->`` run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SNIPPETS = re.findall(r"<!-- snippet-test -->\n```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_tested_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index):
    namespace: dict = {}
    exec(compile(SNIPPETS[index], f"README snippet {index}", "exec"), namespace)  # noqa: S102
