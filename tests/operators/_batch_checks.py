"""Batch independence of the point-set operators: a cloud's output and gradients alone, in a batch, and padded.

Every registered operator whose ``forward`` takes ``pos`` is a point-set operator; operators with a ``ball_mode``
are checked in each of their :data:`BALL_MODES <sciattn.operators.erwin.BALL_MODES>`-like modes (the class
attribute ``ball_modes``). For a target cloud ``a`` (features, positions, weights) the check computes, in float64:

* alone: ``out_a = f(a)`` and the gradients of ``L_a = Σ out_a ⊙ R_a`` (``R_a`` fixed random) with respect to
  every parameter and to the input features;
* batched: ``a`` padded into a batch with other clouds of other sizes and extents (their padding slots hold NaN
  features and positions), ``out[0]`` at ``a``'s points and the gradients of the same ``L_a`` on that row;
* padded: ``a`` alone after ``n + 57`` masked NaN points (the row more than doubles).

The figure is the relative maximum change ``max |Δ| / max |alone|``, separately for the outputs, the parameter
gradients (all concatenated) and the input gradients; :func:`max_changes` returns the largest of each.

:func:`check_pyg_batch_matches_dense` checks the same independence through a ``torch_geometric`` batch.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from sciattn.operators import create_operator, list_operators
from sciattn.operators.registry import operator_class

# extra keys an operator needs to take point sets (the Galerkin Transformer's default head is spectral, on grids)
POINT_CONFIG = {"galerkin_transformer": {"regressor": "pointwise"}}
# small widths so the float64 checks run in seconds; the geometry (ball and cell lengths) stays at the defaults
SMALL = {
    "erwin": {"c_hidden": [8, 16], "enc_depths": [2, 1], "dec_depths": [1], "n_heads": 2, "mlp_ratio": 2},
    "bsa_transformer": {"width": 16, "depth": 2, "n_heads": 2, "mlp_ratio": 2},
    "mspt": {"width": 16, "depth": 2, "n_heads": 2, "mlp_ratio": 2},
}


def point_operators() -> list[str]:
    """Registered operators whose ``forward`` takes positions."""
    return [n for n in list_operators() if "pos" in inspect.signature(operator_class(n).forward).parameters]


def cases(small: bool = True):
    """``(name, mode)`` for every point-set operator and every ball mode it has (``mode`` None: no ball modes)."""
    for name in point_operators():
        modes = getattr(operator_class(name), "ball_modes", None)
        for mode in (modes or (None,)):
            yield name, mode


def build(name: str, mode: str | None, c_in: int, d: int, small: bool = True, seed: int = 0):
    cfg = {"in_channels": c_in, "out_channels": 2, "spatial_dims": d, **POINT_CONFIG.get(name, {})}
    if small:
        cfg.update(SMALL.get(name, {}))
    if mode is not None:
        cfg["ball_mode"] = mode
    torch.manual_seed(seed)
    return create_operator(name, **cfg).double()


def random_clouds(d: int = 3, c_in: int = 3, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Four clouds of different sizes and extents: ``(x (n, c), pos (n, d), weights (n,))`` each. The first is
    the target: uniform in ``[0, 1]^d``; the others are larger, shifted, stretched or tiny, one clustered."""
    g = torch.Generator().manual_seed(seed)
    specs = [(300, 0.0, 1.0), (520, -2.0, 5.0), (130, 0.4, 0.05), (410, 3.0, 0.6)]
    out = []
    for i, (n, lo, side) in enumerate(specs):
        pos = lo + side * torch.rand(n, d, generator=g, dtype=torch.float64)
        if i == 3:  # a quarter of the points in a dense cluster
            pos[: n // 4] = lo + side * (0.3 + 0.02 * torch.rand(n // 4, d, generator=g, dtype=torch.float64))
        x = torch.randn(n, c_in, generator=g, dtype=torch.float64)
        w = 0.5 + torch.rand(n, generator=g, dtype=torch.float64)
        out.append((x, pos, w))
    return out


def _forward(model, x, pos, w, mask):
    return model(x, pos=pos, weights=w, mask=mask)


def _run(model, x, pos, w, mask, row: int, idx: torch.Tensor, r: torch.Tensor):
    """Output of ``row`` at positions ``idx`` and the gradients of ``Σ out ⊙ r`` (parameters, input features)."""
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    out = _forward(model, x, pos, w, mask)[row, idx]
    (out * r).sum().backward()
    grads = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
                       for p in model.parameters()])
    return out.detach(), grads, x.grad[row, idx].detach()


def _pad_batch(clouds, order, front: int = 0):
    """Pad ``clouds`` (in ``order``) into ``(B, n_max + front, ·)`` with NaN padding; row ``k`` holds cloud
    ``order[k]`` after ``front`` masked slots. Returns x, pos, w, mask and the real-point indices of each row."""
    n_max = max(clouds[i][0].shape[0] for i in order) + front
    c, d = clouds[0][0].shape[1], clouds[0][1].shape[1]
    b = len(order)
    nan = float("nan")
    x = torch.full((b, n_max, c), nan, dtype=torch.float64)
    pos = torch.full((b, n_max, d), nan, dtype=torch.float64)
    w = torch.full((b, n_max), nan, dtype=torch.float64)
    mask = torch.zeros(b, n_max, dtype=torch.bool)
    idx = []
    for k, i in enumerate(order):
        xi, pi, wi = clouds[i]
        n = xi.shape[0]
        x[k, front:front + n], pos[k, front:front + n], w[k, front:front + n] = xi, pi, wi
        mask[k, front:front + n] = True
        idx.append(torch.arange(front, front + n))
    return x, pos, w, mask, idx


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(a.abs().max())
    return float((a - b).abs().max()) / scale if scale > 0 else float((a - b).abs().max())


def batch_changes(model, clouds, target: int = 0, seed: int = 0) -> dict[str, float]:
    """Relative maximum changes of cloud ``target``'s output and gradients between alone and (a) batched with
    the other clouds (``target`` in the middle row), (b) padded alone with masked NaN points in front."""
    g = torch.Generator().manual_seed(seed + 7)
    xa, pa, wa = clouds[target]
    n = xa.shape[0]
    r = torch.randn(n, model.out_channels, generator=g, dtype=torch.float64)
    all_n = torch.arange(n)
    alone = _run(model, xa[None], pa[None], wa[None], None, 0, all_n, r)
    assert float(alone[0].abs().max()) > 1e-3 and float(alone[1].abs().max()) > 0, "a constant output proves nothing"
    others = [i for i in range(len(clouds)) if i != target]
    order = others[:1] + [target] + others[1:]
    x, pos, w, mask, idx = _pad_batch(clouds, order)
    batched = _run(model, x, pos, w, mask, 1, idx[1], r)
    x, pos, w, mask, idx = _pad_batch(clouds, [target], front=n + 57)  # more than doubles the row
    padded = _run(model, x, pos, w, mask, 0, idx[0], r)
    out = {}
    for tag, res in (("batched", batched), ("padded", padded)):
        for k, name in enumerate(("output", "param_grad", "input_grad")):
            out[f"{tag} {name}"] = _rel(alone[k], res[k])
    return out


def car_clouds(path, n_cars: int = 3):
    """The first ``n_cars`` cars of ``mini_car.pt`` as float64 clouds ``(x, pos, weights)``; the second is cut
    to its first half (a smaller cloud of the same extent), the third is stretched 2.5x and shifted (a car
    in other units: another extent)."""
    from sciattn.pde_data import load

    ds = load(path, split=None)
    out = []
    for i in range(min(n_cars, len(ds))):
        s = ds[i]
        x, pos, w = s["x"].double(), s["pos"].double(), s["weights"].double()
        if i == 1:
            x, pos, w = x[: x.shape[0] // 2], pos[: pos.shape[0] // 2], w[: w.shape[0] // 2]
        if i == 2:
            pos = 2.5 * pos - 1.0
        out.append((x, pos, w))
    return out


def check_pyg_batch_matches_dense(model, sizes):
    """``model.forward_pyg`` on a ``torch_geometric`` batch of float64 clouds of ``sizes`` points (3 standard normal
    features, uniform 2-D positions, drawn from the global generator) equals each cloud run alone as a batch of one,
    concatenated in order (to 1e-11 relative, 1e-12 absolute). Returns the clouds; skips without torch_geometric."""
    pyg = pytest.importorskip("torch_geometric.data")
    f64 = torch.float64
    graphs = [pyg.Data(x=torch.randn(s, 3, dtype=f64), pos=torch.rand(s, 2, dtype=f64)) for s in sizes]
    out = model.forward_pyg(pyg.Batch.from_data_list(graphs))
    want = torch.cat([model(g.x[None], g.pos[None])[0] for g in graphs])
    torch.testing.assert_close(out, want, rtol=1e-11, atol=1e-12)
    return graphs
