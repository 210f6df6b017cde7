"""The docs site builds with ``sphinx -W`` (no warning), its local links resolve, its API reference
covers every public name, and every gallery script runs (quick mode) and draws a figure.

Default suite: the build without executing the gallery (``SCIATTN_GALLERY_RUN=0``) and each gallery
script once in quick mode (``SCIATTN_GALLERY_QUICK=1``) in a subprocess. Slow: the whole site with the
gallery executed at its full budget.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GALLERY = sorted((ROOT / "examples" / "gallery").glob("plot_*.py"))
PACKAGES = ["sciattn", "sciattn.operators", "sciattn.pde_data", "sciattn.train", "sciattn.galerkin",
            "sciattn.multipole", "sciattn.codomain", "sciattn.balltree", "sciattn.spherical"]

pytest.importorskip("sphinx")
pytest.importorskip("furo")
pytest.importorskip("sphinx_gallery")
pytest.importorskip("myst_parser")


class _Links(HTMLParser):
    """Collects the ``href``/``src`` targets and the element ids of one HTML page."""

    def __init__(self):
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)
            elif name == "id" and value:
                self.ids.add(value)


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def broken_local_links(html_dir: Path) -> list[str]:
    """Every local ``href``/``src`` of every page that does not resolve: a missing file, or a
    ``#fragment`` that is no id of its target page. External (``http:``, ``mailto:``, ...) links are
    not followed."""
    html_dir = Path(html_dir)
    pages = {p.resolve(): None for p in html_dir.rglob("*.html")}
    broken = []
    for page in list(pages):
        for target in _parse(page).targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("javascript:", "data:")):
                continue
            path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                broken.append(f"{page.relative_to(html_dir)}: {target} (no file {path})")
                continue
            if parts.fragment and path.suffix == ".html":
                if pages.get(path) is None:
                    pages[path] = _parse(path).ids
                if unquote(parts.fragment) not in pages[path]:
                    broken.append(f"{page.relative_to(html_dir)}: {target} (no id {parts.fragment!r})")
    return broken


def _build(out: Path, *, run_gallery: bool, quick: bool, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, SCIATTN_GALLERY_RUN="1" if run_gallery else "0", MPLBACKEND="Agg")
    if quick:
        env["SCIATTN_GALLERY_QUICK"] = "1"
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
                           str(DOCS), str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _resolve(qualified: str):
    module, _, name = qualified.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None


def _check_site(html: Path, proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"sphinx -W failed:\n{proc.stderr[-6000:]}"
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr[-6000:]
    for page in ("index.html", "install.html", "api/index.html", "gallery/index.html", "cli.html"):
        assert (html / page).is_file(), f"{page} missing from the built site"
    if importlib.util.find_spec("sphinx-mathjax-offline") is not None:  # the dev/docs extras: maths offline
        mathjax = [t for t in _parse(html / "concepts" / "quadrature.html").targets if "mathjax" in t.lower()]
        assert mathjax and not any(urlsplit(t).scheme or t.startswith("//") for t in mathjax), mathjax
    broken = broken_local_links(html)  # includes the local MathJax script
    assert not broken, f"{len(broken)} broken local links, e.g.:\n" + "\n".join(broken[:20])
    # Every public name of every package has an anchor in the API reference.
    ids = set().union(*(_parse(p).ids for p in (html / "api").rglob("*.html")))
    missing = []
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        for name in mod.__all__:
            if name.startswith("__"):
                continue
            obj = getattr(mod, name)
            if f"{pkg}.{name}" in ids:
                continue
            # Documented once under another module that exports the same object.
            if not any(_resolve(i) is obj for i in ids if i.endswith(f".{name}")):
                missing.append(f"{pkg}.{name}")
    assert not missing, f"public names without an API entry: {missing}"


def test_link_checker_finds_a_broken_link_and_a_missing_fragment(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text('<a href="sub/a.html#x">ok</a> <a href="gone.html">no</a>'
                                         '<a href="sub/a.html#nope">no id</a> <a href="https://x.org/y">ext</a>')
    (tmp_path / "sub" / "a.html").write_text('<p id="x"></p><img src="../index.html">')
    broken = broken_local_links(tmp_path)
    assert len(broken) == 2
    assert any("gone.html" in b for b in broken) and any("nope" in b for b in broken)


def test_docs_build_without_warnings_links_resolve_api_complete(tmp_path):
    html = tmp_path / "html"
    _check_site(html, _build(html, run_gallery=False, quick=True, timeout=900))


_RUNNER = """
import json, runpy, sys, time, traceback
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.show = lambda *a, **k: None
out, report = sys.argv[1], {}
for script in sys.argv[2:]:
    plt.close("all")
    t0 = time.perf_counter()
    try:
        runpy.run_path(script, run_name="__main__")
        nums = plt.get_fignums()
        stem = script.rsplit("/", 1)[-1][:-3]
        for n in nums:
            plt.figure(n).savefig(f"{out}/{stem}_{n}.png")
        report[script] = {"figures": len(nums), "seconds": time.perf_counter() - t0}
    except BaseException:
        report[script] = {"error": traceback.format_exc()}
print("REPORT" + json.dumps(report))
"""


@pytest.fixture(scope="module")
def quick_gallery(tmp_path_factory):
    """Every gallery script run once, in QUICK mode, in one fresh interpreter (each with its own
    globals, as ``python script.py`` would run it); returns ``(report, figure folder)``."""
    out = tmp_path_factory.mktemp("gallery")
    env = dict(os.environ, SCIATTN_GALLERY_QUICK="1", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(out), *map(str, GALLERY)], cwd=out, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0 and "REPORT" in proc.stdout, proc.stderr[-4000:]
    return json.loads(proc.stdout.rsplit("REPORT", 1)[1]), out


@pytest.mark.parametrize("script", GALLERY, ids=[p.stem for p in GALLERY])
def test_gallery_script_runs_in_quick_mode_and_draws(script, quick_gallery):
    """Each script runs (QUICK budget) and draws at least one non-empty figure."""
    report, out = quick_gallery
    result = report[str(script)]
    assert "error" not in result, result.get("error")
    assert result["figures"] >= 1, f"{script.name} drew no figure"
    pngs = sorted(out.glob(f"{script.stem}_*.png"))
    assert len(pngs) == result["figures"] and all(p.stat().st_size > 5000 for p in pngs)


@pytest.mark.slow
def test_docs_build_with_the_full_gallery(tmp_path):
    html = tmp_path / "html"
    proc = _build(html, run_gallery=True, quick=False, timeout=3600)
    _check_site(html, proc)
    for script in GALLERY:
        images = list((html / "_images").glob(f"sphx_glr_{script.stem}_*.png"))
        assert images, f"{script.name}: no figure in the built gallery"


SECTIONS = ("Equations", "Defaults", "Differences from the published code", "Refinement")


def test_every_registered_operator_has_a_docs_page_with_the_sections():
    """The index promises one page per operator: ``docs/operators/<name>.md`` for every registered name, with the
    tier-2 pages' sections (Equations, Defaults, Differences from the published code, Refinement) and a generated
    benchmark table block (``<!-- results:... -->``)."""
    import re

    from sciattn.operators import list_operators

    missing, incomplete = [], {}
    for name in list_operators():
        page = DOCS / "operators" / f"{name}.md"
        if not page.is_file():
            missing.append(name)
            continue
        text = page.read_text()
        heads = re.findall(r"^## (.+)$", text, flags=re.M)
        lacking = [s for s in SECTIONS if not any(h.startswith(s) for h in heads)]
        if "<!-- results:" not in text:
            lacking.append("a generated results block")
        if lacking:
            incomplete[name] = lacking
    assert not missing, f"registered operators without a page in docs/operators/: {missing}"
    assert not incomplete, f"operator pages without the sections {SECTIONS}: {incomplete}"
