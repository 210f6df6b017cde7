"""How ``legacy_galerkin_transformer.pt2`` and its ``_io.pt`` were made: with the code before the operator-contract
refactor (commit d00c217), so that ``tests/train/test_legacy_exports.py`` checks that today's ``load_program``
still loads an export written then and reproduces its outputs.

Run from the root of a checkout of d00c217 (with the package installed from it)::

    python <this file> OUT_DIR
"""

import pathlib
import sys

import torch

sys.path.insert(0, "tests")
import conftest  # noqa: E402  (the tiny training config of that commit's test suite)

from sciattn.pde_data.darcy import generate_darcy  # noqa: E402
from sciattn.pde_data.neuralop_pt import write_neuralop_pt  # noqa: E402
from sciattn.train.cli import main  # noqa: E402
from sciattn.train.export import export_run  # noqa: E402

if __name__ == "__main__":  # a script: importing it (pytest given its path) must not run it
    out = pathlib.Path(sys.argv[1])
    root = out / "data"
    root.mkdir(parents=True, exist_ok=True)
    a, u = (torch.from_numpy(t) for t in generate_darcy(20, [8], seed=5)[8])
    write_neuralop_pt(root / "darcy_train_8.pt", a[:16] > 5, 100 * u[:16])
    write_neuralop_pt(root / "darcy_test_8.pt", a[16:] > 5, 100 * u[16:])
    cfg = root / "galerkin_transformer.toml"
    cfg.write_text(conftest.TINY_CONFIG.format(root=root, epochs=1, n_layers=1))
    run = root / "run"
    assert main(["train", str(cfg), "--out", str(run), "--no-progress"]) == 0
    export_run(run, out / "legacy_galerkin_transformer.pt2", input_dtype="float32")
    program = torch.export.load(str(out / "legacy_galerkin_transformer.pt2")).module()
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    torch.save({"x": x, "y": program(x).detach()}, out / "legacy_galerkin_transformer_io.pt")
