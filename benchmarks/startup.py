"""Start-up cost: ``import torch``, ``import sciattn``, ``import sciattn.train`` and the CLI's ``--help`` /
``backends``, side by side, each in a fresh interpreter (median wall time of ``repeats`` runs).

``python -c pass`` is the interpreter alone; ``import torch`` is the floor every other line pays; the difference to it is what sciattn adds.
The row also says whether the statement imported neuraloperator (``import sciattn.train`` should not).

    python -m benchmarks run startup [--quick]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

from .harness import module_benchmarks

STATEMENTS = {
    "python -c pass": "pass",
    "import torch": "import torch",
    "import sciattn": "import sciattn",
    "import sciattn.train": "import sciattn.train",
}
CLI = ("sciattn --help", "sciattn backends")
_PROBE = "; import sys; print('neuralop' in sys.modules)"


def _argv(case: str) -> list[str]:
    if case in STATEMENTS:
        return [sys.executable, "-c", STATEMENTS[case] + _PROBE]
    exe = shutil.which("sciattn")
    args = case.split()[1:]
    return [exe, *args] if exe else [sys.executable, "-c", "import sys; from sciattn.train.cli import main; "
                                     f"sys.exit(main({args!r}))"]


def _time(case: str) -> tuple[float, bool | None]:
    start = time.perf_counter()
    out = subprocess.run(_argv(case), capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{case!r} failed (exit {out.returncode}): {out.stderr.strip()[-400:]}")
    last = out.stdout.strip().splitlines()[-1] if case in STATEMENTS else None
    return elapsed, (last == "True") if last is not None else None


def run(params: dict) -> list[dict]:
    cases = list(params["cases"])
    repeats = int(params["repeats"])
    times: dict[str, list[float]] = {c: [] for c in cases}
    neuralop: dict[str, bool | None] = {}
    for _ in range(repeats):  # interleaved, so a load spike hits every case alike
        for c in cases:
            t, imported = _time(c)
            times[c].append(t)
            neuralop[c] = imported
    base = statistics.median(times["import torch"]) if "import torch" in times else None
    return [{"case": c, "median_s": statistics.median(times[c]), "min_s": min(times[c]), "repeats": repeats,
             "minus_torch_s": None if base is None else statistics.median(times[c]) - base,
             "imports_neuralop": neuralop[c]} for c in cases]


SCHEMA = {"case": "str", "median_s": "float", "min_s": "float", "repeats": "int", "minus_torch_s": "float?",
          "imports_neuralop": "bool?"}
PARAMS = {"cases": [*STATEMENTS, *CLI], "repeats": 5}
QUICK = {"cases": ["python -c pass", "import torch", "import sciattn"], "repeats": 1}


BENCHMARKS = module_benchmarks(globals(),
    description="Start-up time in a fresh interpreter (median of the repeats), against plain `import torch`;",
    claim="import sciattn.train does not import neuraloperator (docs/install.md)",
)
