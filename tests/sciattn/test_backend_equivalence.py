"""Every registered backend against the float64 reference, generated from the backend registry.

For each op with a case factory in ``CASE_FACTORIES`` and each backend registered for it (see
``sciattn.available_backends()``), on every device here (CPU; CUDA when present) and every dtype
the backend declares a tolerance for, the outputs **and all gradients** must match the float64
``reference`` backend on the same (rounded) inputs, within the backend's declared ``tolerances``:
``|got - want| <= atol * max|want| + rtol * |want|`` (atol is relative to the largest reference
value, so one tolerance serves outputs and gradients of different scales).

The cases cover non-uniform weights, N_q != N_k, padding masks with NaN-poisoned padding (keys,
values and weights), and the options of the op (e.g. Galerkin's fused key/value LayerNorm).
Triton backends run on CPU tensors under ``TRITON_INTERPRET=1``, which the ``interpreter`` fixture
sets for those tests only (the kernels are decorated on first use, inside such a test). Export
``TRITON_INTERPRET=0`` to run the compiled kernels on CUDA instead.

To cover a new op, add ``CASE_FACTORIES["my_op"] = factory`` where ``factory(variant)`` returns a
:class:`Case` and ``VARIANTS["my_op"]`` names the variants.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import sciattn
from sciattn._capabilities import triton_interpreter_enabled as interpreter_enabled
from sciattn._dispatch import backends_for
from sciattn.galerkin import galerkin_attention
from sciattn.galerkin.functional import KVNorm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _attention_cases as cases  # noqa: E402


@dataclass
class Case:
    """One input set of an op, in float64.

    Attributes:
        tensors: named float64 inputs; those in ``grad`` are differentiated.
        grad: names of the inputs whose gradients are compared.
        run: ``run(tensors, backend) -> output`` calls the op's functional.
        extra: non-float inputs (masks, indices), passed to ``run`` unchanged via ``tensors``.
        head_dim: the head size the dispatcher sees.
        has_mask / has_weights: what the dispatcher sees.
    """

    tensors: dict[str, torch.Tensor]
    grad: tuple[str, ...]
    run: Callable[[dict[str, torch.Tensor], str | None], torch.Tensor]
    head_dim: int
    has_mask: bool
    has_weights: bool
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


def _galerkin_case(variant: str) -> Case:
    """Galerkin attention, B=2, H=2, Nq=11, Nk=37 (two blocks of keys), non-uniform weights,
    per-sample padding with NaN keys/values/weights; ``norm`` adds the fused LayerNorm of the
    first features (the last two, like coordinates, pass through)."""
    g = torch.Generator().manual_seed(11)
    b, h, nq, nk, d, e, p = 2, 2, 11, 37, 18, 20, 2
    t = {
        "q": torch.randn(b, h, nq, d, generator=g, dtype=torch.float64),
        "k": 1.5 * torch.randn(b, h, nk, d, generator=g, dtype=torch.float64) + 0.5,
        "v": torch.randn(b, h, nk, e, generator=g, dtype=torch.float64),
        "weights": torch.rand(b, nk, generator=g, dtype=torch.float64) + 0.2,
    }
    mask = torch.ones(b, nk, dtype=torch.bool)
    mask[0, 30:] = False
    mask[1, 9:] = False
    pad = ~mask[:, None, :, None]
    t["k"] = t["k"].masked_fill(pad, float("nan"))
    t["v"] = t["v"].masked_fill(pad, float("nan"))
    t["weights"] = t["weights"].masked_fill(~mask, float("nan"))
    grad = ("q", "k", "v", "weights")
    if variant == "norm":
        t["k_weight"] = 1 + 0.3 * torch.randn(h, d - p, generator=g, dtype=torch.float64)
        t["k_bias"] = 0.3 * torch.randn(h, d - p, generator=g, dtype=torch.float64)
        t["v_weight"] = 1 + 0.3 * torch.randn(h, e - p, generator=g, dtype=torch.float64)
        t["v_bias"] = 0.3 * torch.randn(h, e - p, generator=g, dtype=torch.float64)
        grad += ("k_weight", "k_bias", "v_weight", "v_bias")

    def run(x: dict[str, torch.Tensor], backend: str | None) -> torch.Tensor:
        norm = None
        if "k_weight" in x:
            norm = KVNorm(x["k_weight"], x["k_bias"], x["v_weight"], x["v_bias"], 1e-5)
        return galerkin_attention(x["q"], x["k"], x["v"], weights=x["weights"], mask=x["mask"], backend=backend,
                                  kv_norm=norm)

    return Case(tensors=t, grad=grad, run=run, head_dim=max(d, e), has_mask=True, has_weights=True,
                extra={"mask": mask})


def _weighted_softmax_case(variant: str) -> Case:
    """Weighted softmax attention, B=2, H=2, Nq=13, Nk=70 (more than one key block of the kernels),
    non-uniform weights, per-sample padding with NaN keys/values/weights/key positions; ``distance``
    adds the bias ``-λ_h ‖p_i − p_j‖`` and differentiates both position sets and ``λ``."""
    from sciattn.weighted_softmax import weighted_softmax_attention

    g = torch.Generator().manual_seed(12)
    b, h, nq, nk, d, e, p = 2, 2, 13, 70, 16, 24, 3
    t = cases.random_inputs(g, b, h, nq, nk, d, e, weight_scale=1.0, weight_min=0.2)
    mask = torch.ones(b, nk, dtype=torch.bool)
    mask[0, 61:] = False
    mask[1, 23:] = False
    cases.poison_padding(t, mask)
    grad = ("q", "k", "v", "weights")
    if variant == "distance":
        t["q_pos"] = torch.rand(b, nq, p, generator=g, dtype=torch.float64)
        t["k_pos"] = torch.rand(b, nk, p, generator=g, dtype=torch.float64).masked_fill(~mask[..., None], float("nan"))
        t["distance_scale"] = torch.rand(h, generator=g, dtype=torch.float64) + 0.5
        grad += ("q_pos", "k_pos", "distance_scale")

    def run(x: dict[str, torch.Tensor], backend: str | None) -> torch.Tensor:
        return weighted_softmax_attention(x["q"], x["k"], x["v"], x["weights"], x["mask"], q_pos=x.get("q_pos"),
                                          k_pos=x.get("k_pos"), distance_scale=x.get("distance_scale"), backend=backend)

    return Case(tensors=t, grad=grad, run=run, head_dim=max(d, e), has_mask=True, has_weights=True,
                extra={"mask": mask})


def _neighborhood_case(variant: str) -> Case:
    """CSR neighbourhood attention, B=2, H=2, Nq=11, Nk=40: random neighbourhoods (row 3 empty,
    rows 0-1 longer than one 32-neighbour step, one pair listed twice), non-uniform weights,
    per-sample padding with NaN keys/values/weights that the neighbourhoods do reference."""
    from sciattn.neighborhood import csr_from_pairs, neighborhood_attention

    g = torch.Generator().manual_seed(13)
    b, h, nq, nk, d, e = 2, 2, 11, 40, 16, 24
    t = cases.random_inputs(g, b, h, nq, nk, d, e, weight_scale=1.0, weight_min=0.2)
    allowed = torch.rand(nq, nk, generator=g) < 0.4
    allowed[:2] = torch.rand(2, nk, generator=g) < 0.95
    allowed[3] = False
    rows, cols = allowed.nonzero(as_tuple=True)
    row_offsets, col_indices = csr_from_pairs(torch.cat([rows, rows[:1]]), torch.cat([cols, cols[:1]]), nq)
    mask = torch.ones(b, nk, dtype=torch.bool)
    mask[0, 34:] = False
    mask[1, 17:] = False
    cases.poison_padding(t, mask)

    def run(x: dict[str, torch.Tensor], backend: str | None) -> torch.Tensor:
        return neighborhood_attention(x["q"], x["k"], x["v"], x["row_offsets"], x["col_indices"], x["weights"],
                                      x["mask"], backend=backend)

    return Case(tensors=t, grad=("q", "k", "v", "weights"), run=run, head_dim=max(d, e), has_mask=True,
                has_weights=True, extra={"mask": mask, "row_offsets": row_offsets, "col_indices": col_indices})


CASE_FACTORIES: dict[str, Callable[[str], Case]] = {"galerkin": _galerkin_case}
VARIANTS: dict[str, tuple[str, ...]] = {"galerkin": ("plain", "norm")}
CASE_FACTORIES["weighted_softmax"] = _weighted_softmax_case
VARIANTS["weighted_softmax"] = ("plain", "distance")
CASE_FACTORIES["neighborhood"] = _neighborhood_case
VARIANTS["neighborhood"] = ("plain",)

_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _registry() -> list[tuple[str, str]]:
    rows = sciattn.available_backends(print_table=False)  # imports every family, registering its backends
    return sorted({(r["op"], r["backend"]) for r in rows})


def _params():
    out = []
    for op, name in _registry():
        if op not in CASE_FACTORIES:
            out.append(pytest.param(op, name, "-", "cpu", torch.float32, id=f"{op}-{name}-no-case-factory"))
            continue
        backend = next(b for b in backends_for(op) if b.name == name)
        if not backend.tolerances:
            out.append(pytest.param(op, name, "-", "cpu", torch.float32, id=f"{op}-{name}-no-tolerances"))
            continue
        for dtype in sorted(backend.tolerances, key=str):
            for variant in VARIANTS[op]:
                for device in _DEVICES:
                    out.append(pytest.param(op, name, variant, device, dtype,
                                            id=f"{op}-{name}-{variant}-{device}-{str(dtype)[6:]}"))
    return out


@pytest.fixture
def interpreter(monkeypatch):
    """Turn Triton's interpreter on for this test unless the caller set TRITON_INTERPRET."""
    if "TRITON_INTERPRET" not in os.environ:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, what: str) -> None:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    scale = float(want.abs().max().clamp_min(1e-12))
    err = (got - want).abs()
    bound = atol * scale + rtol * want.abs()
    worst = float((err - bound).max())
    assert worst <= 0, f"{what}: max error {float(err.max()):.3g} exceeds bound (rtol={rtol}, atol={atol}·{scale:.3g})"


@pytest.mark.parametrize("op,name,variant,device,dtype", _params())
def test_backend_matches_float64_reference(op, name, variant, device, dtype, interpreter):
    if op not in CASE_FACTORIES:
        pytest.skip(f"no case factory for op {op!r} in CASE_FACTORIES yet")
    if variant == "-":
        pytest.skip(f"backend {name!r} of op {op!r} declares no tolerances")
    case = CASE_FACTORIES[op](variant)
    backend = next(b for b in backends_for(op) if b.name == name)
    dev = torch.device(device)
    if backend.interpreter_devices is not None and device == "cuda" and interpreter_enabled():
        pytest.skip("TRITON_INTERPRET is on: export TRITON_INTERPRET=0 to test the compiled kernels on CUDA")
    why = backend.reasons_against(device=dev, dtype=dtype, head_dim=case.head_dim, has_mask=case.has_mask,
                                  has_weights=case.has_weights, requires_grad=True)
    if why:
        pytest.skip(f"{name} cannot run here: {'; '.join(why)}")
    rtol, atol = backend.tolerances[dtype]

    def inputs(dt: torch.dtype, dv: torch.device, rounded_to: torch.dtype) -> dict[str, torch.Tensor]:
        x = {n: t.to(rounded_to).to(device=dv, dtype=dt).requires_grad_(n in case.grad)
             for n, t in case.tensors.items()}
        x.update({n: t.to(dv) for n, t in case.extra.items()})
        return x

    x = inputs(dtype, dev, dtype)
    ref_x = inputs(torch.float64, torch.device("cpu"), dtype)  # the same rounded values, in float64
    out = case.run(x, name)
    ref = case.run(ref_x, "reference")
    assert out.dtype == dtype
    _close(out.cpu(), ref, rtol, atol, "output")
    cot = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    grads = torch.autograd.grad((out * cot.to(device=dev, dtype=dtype)).sum(), [x[n] for n in case.grad])
    ref_grads = torch.autograd.grad((ref * cot).sum(), [ref_x[n] for n in case.grad])
    for n, a, r in zip(case.grad, grads, ref_grads):
        assert a.dtype == dtype, n
        _close(a.cpu(), r, rtol, atol, f"grad {n}")
