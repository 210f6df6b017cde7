"""README benchmark tables are verbatim copies of the committed results files."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))


def test_readme_tables_match_the_results_files():
    readme = (ROOT / "README.md").read_text()
    assert "<!-- results:" in readme
    assert TOOL["fill"](readme, ROOT / "benchmarks" / "results") == readme, (
        "README.md is out of date: run python benchmarks/readme_tables.py"
    )


def test_fill_replaces_blocks_and_names_missing_files(tmp_path):
    (tmp_path / "a.md").write_text("| x |\n|---|\n| 1 |\n")
    text = "intro\n<!-- results:a -->\nstale\n<!-- /results:a -->\nend\n"
    assert TOOL["fill"](text, tmp_path) == "intro\n<!-- results:a -->\n| x |\n|---|\n| 1 |\n<!-- /results:a -->\nend\n"
    with pytest.raises(FileNotFoundError, match="README block 'b'"):
        TOOL["fill"]("<!-- results:b -->\n<!-- /results:b -->", tmp_path)
