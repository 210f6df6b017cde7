"""Sphinx configuration of the sciattn site: furo, MyST (the Markdown pages are the user guide),
autodoc/autosummary over each package's ``__all__`` and a sphinx-gallery of runnable examples.

    python -m sphinx -W -b html docs docs/_build/html

``SCIATTN_GALLERY_QUICK=1`` makes the gallery scripts read fewer samples and epochs;
``SCIATTN_GALLERY_RUN=0`` builds the site without executing them (sphinx-gallery's
``plot_gallery=False``). Every build starts from a clean ``docs/gallery``; a build that runs the gallery fails when
a script takes more than ``SCIATTN_GALLERY_SECONDS`` (120) seconds, measured by sphinx-gallery. Nothing here reaches the network: there is no intersphinx mapping, and maths renders from a local
MathJax copy when sphinx-mathjax-offline is installed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # for _apigen and _gallery_order

import _apigen  # noqa: E402
from sphinx.util.docstrings import prepare_docstring  # noqa: E402

import sciattn  # noqa: E402

project = "sciattn"
author = "the sciattn developers"
copyright = "2026, the sciattn developers"
release = version = sciattn.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.intersphinx",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/*.ipynb", "gallery/*.py", "gallery/*.md5", "gallery/*.zip",
                    "gallery/*.json", "gallery/*.codeobj.json", "api/_templates"]
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme = "furo"
html_title = f"sciattn {release}"
html_theme_options = {"navigation_with_keys": True}

# Maths renders with MathJax 3. With sphinx-mathjax-offline installed (the dev and docs extras), a copy of
# MathJax is shipped into _static/mathjax, so the built site renders maths without the network; without it,
# Sphinx's default loads MathJax from its CDN.
if importlib.util.find_spec("sphinx-mathjax-offline") is not None:
    extensions.append("sphinx-mathjax-offline")

# MyST: ```{toctree}``` fences, $...$ maths, heading anchors for `page.md#section` links.
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath", "deflist"]
myst_heading_anchors = 3

# The API reference is generated from the packages' __all__ (docs/_apigen.py) into docs/api/_auto/.
autosummary_generate = False
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
# A method without its own docstring shows none (not nn.Module's "Define the computation ...").
autodoc_inherit_docstrings = False
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_class_signature = "mixed"
add_module_names = False
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_preprocess_types = False

# Offline: no intersphinx inventories are fetched (types of torch/numpy render as plain text).
intersphinx_mapping: dict = {}
intersphinx_disabled_reftypes = ["*"]
# Type hints name torch/numpy/xarray objects that have no page here: not a broken link.
nitpicky = False

_run_gallery = os.environ.get("SCIATTN_GALLERY_RUN", "1") != "0"

# Every build starts from a clean gallery folder: output left by an interrupted or quick-mode build (its .rst,
# images, pickled code objects) is never mixed into this one. docs/gallery is generated (and git-ignored).
import shutil  # noqa: E402

shutil.rmtree(HERE / "gallery", ignore_errors=True)

#: seconds one gallery script may run at its full budget (measured by the build on the build machine; a loaded
#: 2-core machine is the target). A script over it fails the build, naming it and its time.
GALLERY_SECONDS_LIMIT = float(os.environ.get("SCIATTN_GALLERY_SECONDS", "120"))
GALLERY_TIMES: dict[str, float] = {}
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples" / "gallery"),
    "gallery_dirs": str(HERE / "gallery"),
    "filename_pattern": r"/plot_",
    "plot_gallery": _run_gallery,
    # Re-run every script on every build: a quick-mode run must never leave its outputs in a full build.
    "run_stale_examples": True,
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "_gallery_order.GalleryOrder",  # a name: the config stays picklable
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "show_memory": False,
    "min_reported_time": 1,
}

# Written before autosummary reads them, on every build: new names in any __all__ appear at once.
# DOCUMENTED maps id(object) -> the qualified name its entry is under.
DOCUMENTED = _apigen.write_api_pages(HERE / "api" / "_auto")


# Docstring markup that is plain text in the source but RST syntax to docutils, fixed once here
# instead of in every docstring: ``(N, C, *spatial)`` (not emphasis), ``|x|`` (not a substitution),
# and a data object whose "docstring" is its type's (a dict's constructor help).
_STARRED = re.compile(r"(?<![\\\w*])(\*{1,2})(?=(spatial|shape|extra|args|kwargs|sizes|batch)\b)")


def _escape_plain(text: str) -> str:
    parts = re.split(r"(``.*?``|`[^`]*`_?|:\w+:`[^`]*`)", text)
    for i in range(0, len(parts), 2):
        parts[i] = _STARRED.sub(lambda m: "\\*" * len(m.group(1)), parts[i])
        parts[i] = re.sub(r"(?<!\\)\|", r"\\|", parts[i])
    return "".join(parts)


def _process_docstring(app, what, name, obj, options, lines):
    own = getattr(type(obj), "__doc__", None)
    if what in ("data", "attribute") and isinstance(own, str) and lines[:3] == prepare_docstring(own)[:3]:
        lines[:] = []
        return
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("|", "+-", "+=")):  # line blocks and grid tables keep their bars
            continue
        lines[i] = _escape_plain(line)


# Pages other work adds (docs/operators/*.md, docs/fidelity.md) are globbed in index.md; a glob that
# matches nothing yet is dropped here, since Sphinx warns about it (and -W makes that an error).
_OPTIONAL_GLOBS = ("operators/*", "fidelity*")


def _drop_empty_globs(app, docname, source):
    if docname != "index":
        return
    for pattern in _OPTIONAL_GLOBS:
        if not any(p.suffix in (".md", ".rst") for p in HERE.glob(pattern)):
            source[0] = re.sub(rf"^{re.escape(pattern)}\n", "", source[0], flags=re.M)


_NAME_LIST = re.compile(r"^(\s+)(\w+, )*\w+,$")


def _join_wrapped_names(app, what, name, obj, options, lines):
    """``Args:`` entries that list several names wrapped over lines (``a, b,`` / ``c: as ...``) are
    one entry to a reader but a broken field list to napoleon: join them (runs before napoleon)."""
    i = 0
    while i < len(lines) - 1:
        m = _NAME_LIST.match(lines[i])
        if m and lines[i + 1].startswith(m.group(1)) and not lines[i + 1].startswith(m.group(1) + " "):
            lines[i:i + 2] = [lines[i] + " " + lines[i + 1].strip()]
            continue
        i += 1


def _resolve_alias(app, env, node, contnode):
    """A reference to ``sciattn.X.name`` finds the entry of the same object documented under another
    name (a re-export: ``sciattn.multipole.window_attention`` is ``sciattn.window_attention``). Other
    unresolved targets (private helpers, base classes, torch types) stay plain text, as Sphinx renders them."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("sciattn"):
        return None
    obj = _apigen.resolve(target)
    documented = DOCUMENTED.get(id(obj)) if obj is not None else None
    owner_name, _, member = target.rpartition(".")
    owner = _apigen.resolve(owner_name) if obj is not None and not documented else None
    if owner is not None and id(owner) in DOCUMENTED:  # a method or attribute of a documented class
        documented = f"{DOCUMENTED[id(owner)]}.{member}"
    if documented and documented != target:
        py = env.domains["py"]
        return py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], documented, node, contnode)
    return None


def _record_gallery_times() -> None:
    """Wrap sphinx-gallery's timing report so the build keeps each script's execution time."""
    from sphinx_gallery import gen_gallery

    original = gen_gallery.write_computation_times
    if getattr(original, "_sciattn", False):
        return

    def record(gallery_conf, target_dir, costs):
        for cost in costs:
            GALLERY_TIMES[Path(cost.src_file).name] = float(cost.execution_time)
        return original(gallery_conf, target_dir, costs)

    record._sciattn = True  # type: ignore[attr-defined]
    gen_gallery.write_computation_times = record


def _check_gallery_times(app, exception):
    if exception is not None or not _run_gallery:
        return
    slow = {name: t for name, t in GALLERY_TIMES.items() if t > GALLERY_SECONDS_LIMIT}
    if slow:
        from sphinx.errors import ExtensionError

        detail = ", ".join(f"{name} {t:.0f} s" for name, t in sorted(slow.items()))
        raise ExtensionError(f"gallery: expected every script to run in under {GALLERY_SECONDS_LIMIT:.0f} s on this "
                             f"machine, got {detail} (trim its budget, or SCIATTN_GALLERY_SECONDS for a slower machine)")


def _skip_tuple_fields(app, what, name, obj, skip, options):
    """A NamedTuple's fields carry Python's generated "Alias for field number N": noise on an API page (the
    class docstring describes its fields)."""
    doc = getattr(obj, "__doc__", None)
    if isinstance(doc, str) and doc.startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_tuple_fields)
    _record_gallery_times()
    app.connect("build-finished", _check_gallery_times)
    app.connect("missing-reference", _resolve_alias)
    app.connect("autodoc-process-docstring", _join_wrapped_names, priority=100)
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("source-read", _drop_empty_globs)
