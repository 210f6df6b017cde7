"""Poisoned padding: NaN or ±inf in every padded position changes nothing on the real rows.

For every masked functional (Galerkin, weighted softmax, CSR neighbourhood, window attention)
and every backend registered for it that runs on CPU (enumerated from the registry, as in
``test_backend_equivalence.py``), a self-attention batch (``Nq == Nk``, one mask for queries and
keys) is evaluated twice in float64: once with random finite padding, once with NaN, +inf, -inf
or a mixture of them in every padded position of q, k, v, the weights and the positions.
The loss reads the real rows only. Then:

- the forward output is finite everywhere and equals the clean one on the real rows;
- the gradient of every input is finite everywhere and equals the clean one on the real
  positions (parameters such as the fused LayerNorm's weights or ``distance_scale``: everywhere).

A backend that runs here forward-only (``flex``: no backward on CPU) is checked forward-only;
one that cannot run here at all (``triton`` without triton) is skipped with its reasons.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import sciattn
from sciattn._dispatch import backends_for

F64 = torch.float64
POISONS = ("nan", "inf", "-inf", "mixed")


@dataclass
class Case:
    """A clean float64 self-attention input set.

    ``real`` maps each poisonable tensor to a bool tensor broadcastable to it (True = real entry);
    ``params`` are differentiated tensors that have no padded entries; ``rows`` is the bool of
    real output rows, broadcastable to the output."""

    tensors: dict[str, torch.Tensor]
    real: dict[str, torch.Tensor]
    params: tuple[str, ...]
    rows: torch.Tensor
    run: Callable[[dict[str, torch.Tensor], str], torch.Tensor]
    head_dim: int
    extra: dict[str, torch.Tensor]


def _mask(b: int, n: int, g: torch.Generator) -> torch.Tensor:
    mask = torch.rand(b, n, generator=g) > 0.3
    mask[0, -3:] = False  # trailing padding
    mask[:, 0] = True
    return mask


def _points(g, b=2, h=2, n=23, d=6, e=5):
    mask = _mask(b, n, g)
    t = {
        "q": torch.randn(b, h, n, d, generator=g, dtype=F64),
        "k": torch.randn(b, h, n, d, generator=g, dtype=F64),
        "v": torch.randn(b, h, n, e, generator=g, dtype=F64),
        "weights": torch.rand(b, n, generator=g, dtype=F64) + 0.2,
    }
    rows = mask[:, None, :, None]
    real = {"q": rows, "k": rows, "v": rows, "weights": mask}
    return t, real, mask


def _galerkin(variant: str) -> Case:
    from sciattn.galerkin import galerkin_attention
    from sciattn.galerkin.functional import KVNorm

    g = torch.Generator().manual_seed(1)
    t, real, mask = _points(g)
    params: tuple[str, ...] = ()
    if variant == "norm":
        h, d, e = 2, t["k"].shape[-1], t["v"].shape[-1]
        t |= {
            "k_weight": 1 + 0.3 * torch.randn(h, d - 2, generator=g, dtype=F64),
            "k_bias": 0.3 * torch.randn(h, d - 2, generator=g, dtype=F64),
            "v_weight": 1 + 0.3 * torch.randn(h, e, generator=g, dtype=F64),
            "v_bias": 0.3 * torch.randn(h, e, generator=g, dtype=F64),
        }
        params = ("k_weight", "k_bias", "v_weight", "v_bias")

    def run(x, backend):
        norm = None if variant != "norm" else KVNorm(x["k_weight"], x["k_bias"], x["v_weight"], x["v_bias"], 1e-5)
        return galerkin_attention(x["q"], x["k"], x["v"], weights=x["weights"], mask=x["mask"], backend=backend,
                                  kv_norm=norm)

    return Case(t, real, params, real["q"], run, 6, {"mask": mask})


def _weighted_softmax(variant: str) -> Case:
    from sciattn.weighted_softmax import weighted_softmax_attention

    g = torch.Generator().manual_seed(2)
    t, real, mask = _points(g)
    params: tuple[str, ...] = ()
    if variant == "distance":
        n = mask.shape[1]
        t["q_pos"] = torch.rand(2, n, 3, generator=g, dtype=F64)
        t["k_pos"] = t["q_pos"].clone()
        t["distance_scale"] = torch.rand(2, generator=g, dtype=F64) + 0.5
        real |= {"q_pos": mask[..., None], "k_pos": mask[..., None]}
        params = ("distance_scale",)
    if variant == "uniform":
        del t["weights"], real["weights"]

    def run(x, backend):
        return weighted_softmax_attention(x["q"], x["k"], x["v"], x.get("weights"), x["mask"], q_pos=x.get("q_pos"),
                                          k_pos=x.get("k_pos"), distance_scale=x.get("distance_scale"),
                                          backend=backend)

    return Case(t, real, params, real["q"], run, 6, {"mask": mask})


def _neighborhood(variant: str) -> Case:
    from sciattn.neighborhood import csr_from_pairs, neighborhood_attention

    g = torch.Generator().manual_seed(3)
    t, real, mask = _points(g)
    n = mask.shape[1]
    allowed = torch.rand(n, n, generator=g) < 0.4
    allowed[2] = False  # an empty neighbourhood
    rows, cols = allowed.nonzero(as_tuple=True)
    row_offsets, col_indices = csr_from_pairs(rows, cols, n)

    def run(x, backend):
        return neighborhood_attention(x["q"], x["k"], x["v"], x["row_offsets"], x["col_indices"], x["weights"],
                                      x["mask"], backend=backend)

    return Case(t, real, (), real["q"], run, 6,
                {"mask": mask, "row_offsets": row_offsets, "col_indices": col_indices})


def _window(variant: str) -> Case:
    from sciattn.multipole.functional import window_attention

    g = torch.Generator().manual_seed(4)
    b, h, grid, win = 2, 2, (7, 5), (3, 2)  # not a multiple of the window: internal padding too
    mask = torch.rand(b, *grid, generator=g) > 0.3
    mask[0, -2:, :] = False
    mask[:, 0, 0] = True
    t = {
        "q": torch.randn(b, h, *grid, 4, generator=g, dtype=F64),
        "k": torch.randn(b, h, *grid, 4, generator=g, dtype=F64),
        "v": torch.randn(b, h, *grid, 3, generator=g, dtype=F64),
        "weights": torch.rand(b, *grid, generator=g, dtype=F64) + 0.2,
    }
    params: tuple[str, ...] = ()
    if variant == "bias":
        t["bias"] = torch.randn(h, math.prod(win), math.prod(win), generator=g, dtype=F64)
        params = ("bias",)
    rows = mask[:, None, ..., None]
    real = {"q": rows, "k": rows, "v": rows, "weights": mask}

    def run(x, backend):
        return window_attention(x["q"], x["k"], x["v"], win, weights=x["weights"], mask=x["mask"],
                                bias=x.get("bias"), backend=backend)

    return Case(t, real, params, rows, run, 4, {"mask": mask})


CASES: dict[str, tuple[Callable[[str], Case], tuple[str, ...]]] = {
    "galerkin": (_galerkin, ("plain", "norm")),
    "weighted_softmax": (_weighted_softmax, ("plain", "uniform", "distance")),
    "neighborhood": (_neighborhood, ("plain",)),
    "multipole": (_window, ("plain", "bias")),
}


def _params():
    sciattn.available_backends(print_table=False)  # imports every family, registering its backends
    out = []
    for op, (_, variants) in CASES.items():
        for backend in backends_for(op):
            for variant in variants:
                for poison in POISONS:
                    out.append(pytest.param(op, backend.name, variant, poison, id=f"{op}-{backend.name}-{variant}-{poison}"))
    return out


def test_every_masked_functional_is_covered():
    """Each masked functional's op has a case here, and each has at least one CPU backend."""
    sciattn.available_backends(print_table=False)
    for op in CASES:
        assert backends_for(op), op


def _poison(t: torch.Tensor, real: torch.Tensor, poison: str, g: torch.Generator) -> torch.Tensor:
    if poison == "mixed":
        choice = torch.randint(0, 3, t.shape, generator=g)
        bad = torch.tensor([math.nan, math.inf, -math.inf], dtype=t.dtype)[choice]
    else:
        bad = torch.full_like(t, float(poison))
    return torch.where(real, t, bad)


def _evaluate(case: Case, x: dict[str, torch.Tensor], backend: str, with_grad: bool, cot: torch.Tensor):
    names = tuple(case.real) + case.params
    leaves = {n: x[n].clone().requires_grad_(with_grad) for n in names}
    out = case.run({**x, **leaves, **case.extra}, backend)
    if not with_grad:
        return out.detach(), {}
    loss = (out * torch.where(case.rows, cot, torch.zeros((), dtype=F64))).sum()
    grads = torch.autograd.grad(loss, [leaves[n] for n in names])
    return out.detach(), dict(zip(names, grads))


@pytest.mark.parametrize("op,name,variant,poison", _params())
def test_poisoned_padding_leaves_real_rows_and_gradients_exact(op, name, variant, poison):
    factory, _ = CASES[op]
    case = factory(variant)
    backend = next(b for b in backends_for(op) if b.name == name)
    props = dict(device=torch.device("cpu"), dtype=F64, head_dim=case.head_dim, has_mask=True,
                 has_weights="weights" in case.tensors)
    with_grad = not backend.reasons_against(**props, requires_grad=True)
    if not with_grad and backend.reasons_against(**props):
        pytest.skip(f"{name} does not run here: {'; '.join(backend.reasons_against(**props))}")
    clean = case.tensors
    g = torch.Generator().manual_seed(99)
    poisoned = {n: _poison(clean[n], case.real[n], poison, g) if n in case.real else clean[n] for n in clean}
    for n in case.real:  # every padded position does hold the poison
        assert not torch.isfinite(poisoned[n]).all(), n
    probe = case.run({**clean, **case.extra}, name)
    cot = torch.randn(probe.shape, generator=g, dtype=F64)

    out0, grads0 = _evaluate(case, clean, name, with_grad, cot)
    out1, grads1 = _evaluate(case, poisoned, name, with_grad, cot)
    assert torch.isfinite(out1).all(), "forward not finite"
    rows = case.rows.expand(out0.shape)
    torch.testing.assert_close(out1[rows], out0[rows], rtol=1e-13, atol=1e-13)
    for n, g1 in grads1.items():
        assert torch.isfinite(g1).all(), f"d{n} not finite with {poison} padding"
        g0 = grads0[n]
        keep = case.real[n].expand(g0.shape) if n in case.real else torch.ones_like(g0, dtype=torch.bool)
        torch.testing.assert_close(g1[keep], g0[keep], rtol=1e-12, atol=1e-12, msg=lambda m, n=n: f"d{n}: {m}")
        if n in case.real:  # padded keys/values/weights get no gradient at all
            if n != "q" and n != "q_pos":
                assert torch.equal(g1[~keep], torch.zeros_like(g1[~keep])), f"d{n} nonzero on padding"


@pytest.mark.parametrize("op,name,variant", sorted({p.values[:3] for p in _params()}))
def test_clean_forward_is_bit_identical_to_the_unsanitised_computation(op, name, variant, monkeypatch):
    """Finite padding is used as given: sanitising replaces only NaN and ±inf, so on clean inputs
    every output row (padded query rows included) is bit for bit what the computation without the
    defence gives (the old behaviour)."""
    import sciattn._attention_inputs as prep
    import sciattn.galerkin.functional as gal
    import sciattn.multipole.functional as win
    import sciattn.weighted_softmax.functional as wsm

    factory, _ = CASES[op]
    case = factory(variant)
    backend = next(b for b in backends_for(op) if b.name == name)
    if backend.reasons_against(device=torch.device("cpu"), dtype=F64, head_dim=case.head_dim, has_mask=True,
                               has_weights="weights" in case.tensors):
        pytest.skip(f"{name} does not run here")
    x = {**case.tensors, **case.extra}
    with torch.no_grad():
        got = case.run(x, name)
        for mod in (prep, gal, win, wsm):  # the modules that call it (neighbourhood: through prep)
            monkeypatch.setattr(mod, "sanitize_padded_rows", lambda t, keep: t)
        want = case.run(x, name)
    assert torch.equal(got, want)
