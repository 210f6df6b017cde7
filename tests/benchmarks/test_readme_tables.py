"""README benchmark tables are verbatim copies of the committed results files."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))


def test_readme_and_docs_tables_match_the_results_files():
    pages = TOOL["pages"]()
    assert ROOT / "README.md" in pages and ROOT / "docs" / "benchmarks" / "index.md" in pages
    assert "<!-- results:" in (ROOT / "README.md").read_text()
    for page in pages:
        text = page.read_text()
        assert TOOL["fill"](text, ROOT / "benchmarks" / "results") == text, (
            f"{page.name} is out of date: run python benchmarks/readme_tables.py"
        )


def test_fill_replaces_blocks_and_names_missing_files(tmp_path):
    (tmp_path / "a.md").write_text("| x |\n|---|\n| 1 |\n")
    text = "intro\n<!-- results:a -->\nstale\n<!-- /results:a -->\nend\n"
    assert TOOL["fill"](text, tmp_path) == "intro\n<!-- results:a -->\n| x |\n|---|\n| 1 |\n<!-- /results:a -->\nend\n"
    with pytest.raises(FileNotFoundError, match="README block 'b'"):
        TOOL["fill"]("<!-- results:b -->\n<!-- /results:b -->", tmp_path)


def test_readme_stays_short_and_its_links_resolve():
    import re

    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 15_000, "README.md over 15 KB: move detail into docs/"
    assert "../shared" not in readme  # nothing outside the repository
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        assert (ROOT / target).exists(), f"README links {target!r}, which does not exist"
