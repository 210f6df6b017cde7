"""Export a trained run as a self-contained program that runs without sciattn.

``export_run(run_dir, out_path)`` wraps ``x_normalizer.encode -> operator -> y_normalizer.decode``
into one ``nn.Module`` (input: the raw, un-normalised field ``x`` of shape ``(B, C_in, *spatial)``,
output: the physical prediction ``(B, C_out, *spatial)``) and writes it as

* ``format="torch-export"``: a ``torch.export`` program (``.pt2``), loaded with
  ``torch.export.load(path).module()`` by a process that has only ``torch``;
* ``format="onnx"``: an ONNX model via ``torch.onnx.export`` (needs the ``onnx`` and
  ``onnxscript`` packages, which sciattn does not depend on). torch.onnx cannot convert
  complex-valued parameters, so this works for ``regressor="pointwise"`` models only; the
  spectral regressor (neuraloperator's ``SpectralConv``) is refused with a ``ValueError``.
  The ONNX model's input is ``x``, its output ``y``; it may not keep the finiteness check.

Operators. Written for and tested with the Galerkin Transformer; another operator exports if
torch.export can trace it (one with a data-dependent Python check, such as MANO's validation
of quadrature weights, raises ``RuntimeError`` naming the cause).

Shapes. The batch dim is dynamic. The spatial dims are not: the Galerkin Transformer builds
its quadrature grid (nodes and weights) and, with ``latent_resolution``, its resampling plan in
Python from the input's spatial size, so tracing fixes the resolution. ``export_run`` tries
dynamic spatial dims first and falls back, recording what it got in the returned dict
(``dynamic_dims``, ``fixed_resolution``); for this operator the program accepts exactly the
exported resolution (the run's training resolution unless ``example_shape`` picks another).
Export again at each resolution a pipeline needs.

The program checks its input: a non-finite ``x`` raises ``RuntimeError: x: expected finite
values`` (an ``aten._assert_async`` in the graph), and a wrong shape fails the program's
shape guards.

How: sciattn's input checks become in-graph ``torch._assert_async`` assertions under tracing
(``torch.compiler.is_compiling()``), and sizes stay symbolic. The one thing patched, for the
duration of the export only (module-global, not thread-safe), is tensorly's einsum: neuraloperator
switches it to an opt-einsum plugin that plans contractions from concrete shapes, and the export
uses plain ``torch.einsum`` instead; it is restored afterwards, also on error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sciattn._checks import check_choice
from sciattn._io import atomic_path

from .checkpoint import load_model
from .surrogate import run_metadata

__all__ = ["export_run", "ExportedOperator", "FORMATS"]

FORMATS = ("torch-export", "onnx")
_MAX_BATCH = 1 << 16


class ExportedOperator(nn.Module):
    """``y_normalizer.decode(model(x_normalizer.encode(x)))`` as one module, with an in-graph finiteness check."""

    def __init__(self, model: nn.Module, x_normalizer: nn.Module, y_normalizer: nn.Module):
        super().__init__()
        self.model, self.x_normalizer, self.y_normalizer = model, x_normalizer, y_normalizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert_async(torch.isfinite(x).all(), "x: expected finite values")
        return self.y_normalizer.decode(self.model(self.x_normalizer.encode(x)))


@contextlib.contextmanager
def _traceable() -> Iterator[None]:
    """Switch tensorly from neuraloperator's opt-einsum plugin (which plans contractions from
    concrete shapes) to plain ``torch.einsum`` while tracing; restore on exit."""
    tl_state = None
    try:
        try:
            import tensorly as tl
            import tensorly.plugins as tl_plugins
        except ImportError:  # pragma: no cover - tensorly comes with neuraloperator
            tl_plugins = None
        if tl_plugins is not None and tl_plugins.PREVIOUS_EINSUM is not None:
            tl_state = (tl.backend.current_backend().einsum, tl_plugins.PREVIOUS_EINSUM)
            tl_plugins.use_default_einsum()
        yield
    finally:
        if tl_state is not None:
            tl.backend.BackendManager.register_backend_method("einsum", tl_state[0])
            tl_plugins.PREVIOUS_EINSUM = tl_state[1]


def _example_shape(example_shape, state, run_dir, in_channels: int, spatial_dims: int) -> tuple[int, list[int]]:
    """``(batch, spatial)`` from ``example_shape`` (spatial, (C, *spatial) or (B, C, *spatial)) or the run."""
    d = spatial_dims
    if example_shape is None:
        res = run_metadata(state, run_dir).get("train_resolution")
        if res is None or len(res) != d:
            raise ValueError(
                f"example_shape: the run records no training resolution with {d} axes; pass example_shape="
                f"(S_1, ..., S_{d}) or (B, C_in, S_1, ..., S_{d})"
            )
        return 1, [int(n) for n in res]
    if isinstance(example_shape, (str, bytes)) or not isinstance(example_shape, Sequence):
        raise TypeError(f"example_shape: expected a sequence of ints, got {type(example_shape).__name__}")
    shape = list(example_shape)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise ValueError(f"example_shape: expected positive ints, got {tuple(example_shape)}")
    if len(shape) not in (d, d + 1, d + 2):
        raise ValueError(
            f"example_shape: expected {d} spatial sizes, (C_in, *spatial) or (B, C_in, *spatial), got {tuple(shape)}"
        )
    if len(shape) > d and shape[-d - 1] != in_channels:
        raise ValueError(f"example_shape: expected C_in = {in_channels} input channels, got {shape[-d - 1]}")
    return (shape[0] if len(shape) == d + 2 else 1), shape[-d:]


def _is_shape_constraint_error(err: Exception) -> bool:
    text = f"{type(err).__name__}: {err}"
    return "Constraints violated" in text or "specialized it to be a constant" in text


def _trace(module: nn.Module, batch: int, spatial: list[int], in_channels: int, dynamic_spatial: bool, tracer):
    """Try (batch + spatial), then batch only, then nothing dynamic; returns ``(result, dynamic, example)``."""
    from torch.export import Dim

    d = len(spatial)
    attempts: list[dict[int, Any]] = []
    if dynamic_spatial:
        attempts.append({0: Dim("batch", min=1, max=_MAX_BATCH),
                         **{2 + i: Dim(f"s{i}", min=2, max=1 << 14) for i in range(d)}})
    attempts.append({0: Dim("batch", min=1, max=_MAX_BATCH)})
    attempts.append({})
    errors = []
    for dyn in attempts:
        # A dynamic dim is traced at size >= 2: torch specialises sizes 0 and 1.
        b = max(batch, 2) if 0 in dyn else batch
        example = torch.randn(b, in_channels, *spatial)
        try:
            return tracer(module, example, {"x": dyn} if dyn else None), sorted(dyn), list(example.shape)
        except Exception as err:  # noqa: BLE001 - torch raises many types
            if not _is_shape_constraint_error(err):
                first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
                raise RuntimeError(
                    f"export: could not trace the operator at input shape {tuple(example.shape)} "
                    f"({type(err).__name__}: {first}); a data-dependent Python branch in the model, or an op the "
                    f"exporter does not support, is the usual cause (full error chained below)"
                ) from err
            errors.append(err)
    raise RuntimeError(f"export: tracing failed even with static shapes: {errors[-1]}") from errors[-1]


def export_run(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    format: str = "torch-export",
    example_shape: Sequence[int] | None = None,
    dynamic_spatial: bool = True,
) -> dict[str, Any]:
    """Write the run's ``encode -> operator -> decode`` pipeline to ``out_path`` (atomically).

    Args:
        run_dir: run directory (or checkpoint file) written by ``sciattn train``.
        out_path: target file (``.pt2`` for torch-export, ``.onnx`` for ONNX by convention).
        format: ``"torch-export"`` or ``"onnx"``.
        example_shape: the resolution to export at: spatial sizes, ``(C_in, *spatial)`` or
            ``(B, C_in, *spatial)``; default the run's training resolution (``train_resolution``
            in its ``metrics.json``). A batch given here is only the example's; the batch dim is
            dynamic whenever tracing allows it.
        dynamic_spatial: try dynamic spatial dims first (they fail for the Galerkin Transformer,
            see the module docstring; ``False`` skips the attempt).

    Returns:
        ``{"format", "path", "input_name": "x", "input_shape" (the traced example),
        "output_shape", "dynamic_dims" (axes of ``x`` that may vary), "fixed_resolution"
        (the spatial sizes the program requires, or ``None`` if they are dynamic), "in_channels",
        "out_channels", "spatial_dims", "operator", "note"}``.

    The program computes in float32 and expects a float32 input on the CPU.
    """
    check_choice("format", format, FORMATS)
    if format == "onnx":
        missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(
                f"format='onnx': requires the {' and '.join(repr(m) for m in missing)} package(s), which are not "
                f"installed (pip install {' '.join(missing)}); format='torch-export' needs only torch"
            )
    out_path = Path(out_path)
    if out_path.is_dir():
        raise IsADirectoryError(f"out_path: expected a file path, got the directory {str(out_path)!r}")
    model, xn, yn, state = load_model(run_dir, device="cpu")
    d = int(getattr(model, "spatial_dims", 2))
    c_in, c_out = int(model.in_channels), int(model.out_channels)
    batch, spatial = _example_shape(example_shape, state, run_dir, c_in, d)
    if format == "onnx":
        complex_params = [n for n, p in model.named_parameters() if p.is_complex()]
        if complex_params:
            raise ValueError(
                f"format='onnx': torch.onnx cannot convert complex-valued parameters, and this operator has "
                f"{len(complex_params)} (e.g. {complex_params[0]!r}, from the spectral regressor); use "
                f"format='torch-export', or train with regressor='pointwise' for ONNX"
            )
    module = ExportedOperator(model, xn, yn).eval()

    if format == "torch-export":
        def tracer(mod, example, dynamic_shapes):
            return torch.export.export(mod, (example,), dynamic_shapes=dynamic_shapes)
    else:
        def tracer(mod, example, dynamic_shapes):
            return torch.onnx.export(mod, (example,), dynamo=True, dynamic_shapes=dynamic_shapes,
                                     input_names=["x"], output_names=["y"], external_data=False,
                                     verbose=False)

    with torch.no_grad(), _traceable():
        program, dynamic, example = _trace(module, batch, spatial, c_in, dynamic_spatial, tracer)

    with atomic_path(out_path) as tmp:
        if format == "torch-export":
            buf = io.BytesIO()  # torch.export.save wants a ".pt2" name or a buffer; the temporary file has neither
            torch.export.save(program, buf)
            tmp.write_bytes(buf.getvalue())
        else:
            program.save(str(tmp), external_data=False)

    fixed = None if all(2 + i in dynamic for i in range(d)) else list(spatial)
    if fixed is None:
        note = "batch and spatial dims are dynamic"
    else:
        note = (f"spatial dims are fixed at {tuple(fixed)}: the operator builds its grid from the input size "
                f"in Python; export again for another resolution")
        note += "; the batch dim is dynamic" if 0 in dynamic else "; the batch dim is fixed too"
    out_shape = [example[0], c_out, *spatial]
    return {
        "format": format,
        "path": str(out_path),
        "input_name": "x",
        "input_shape": example,
        "output_shape": out_shape,
        "dynamic_dims": dynamic,
        "fixed_resolution": fixed,
        "in_channels": c_in,
        "out_channels": c_out,
        "spatial_dims": d,
        "operator": state.get("operator"),
        "note": note,
    }
