"""Export a trained run as a self-contained program that runs without sciattn.

``export_run(run_dir, out_path)`` wraps ``x_normalizer.encode -> operator -> y_normalizer.decode``
into one ``nn.Module`` and writes it as

* ``format="torch-export"``: a ``torch.export`` program (``.pt2``), loaded with
  ``torch.export.load(path).module()`` by a process that has only ``torch``;
* ``format="onnx"``: an ONNX model via ``torch.onnx.export(dynamo=True)``, which needs the ``onnx``
  and ``onnxscript`` packages (``pip install "sciattn[onnx]"``; sciattn does not depend on them and
  ``sciattn export --format onnx`` says so in one line when they are missing). torch.onnx cannot
  convert complex-valued parameters, so the spectral regressor (neuraloperator's ``SpectralConv``)
  is refused with a ``ValueError``; ``regressor="pointwise"`` models convert. Input ``x``, output ``y``.

Inputs and outputs:

* grid operators: ``x`` ``(B, C_in, *spatial)`` in, the physical prediction ``(B, C_out, *spatial)`` out;
* point-set operators (Erwin, BSA, and any run trained on point clouds): ``x`` ``(B, N, C_in)``,
  ``pos`` ``(B, N, d)``, ``weights`` ``(B, N)`` (quadrature weights; any positive values, e.g.
  ones: the operators normalise them per cloud) and ``mask`` ``(B, N)`` bool (True on real points),
  in that order; the prediction ``(B, N, C_out)`` out.

Shapes. Batch and spatial sizes are dynamic wherever the operator's code allows it, and
``export_run`` says what it got (``dynamic_dims``, ``dynamic_ranges``, ``fixed_resolution``, ``note``):

* Galerkin Transformer and CoDANO: batch and every spatial size are dynamic (a size can have a lower
  bound, e.g. a spectral regressor needs enough points for its modes: see ``dynamic_ranges``). The
  quadrature grid, positional encodings and chunking are built from symbolic sizes in the graph.
  An operator with ``export_size_multiple`` (the Galerkin Transformer with ``latent_resolution``) has its
  spatial sizes declared as multiples of it (``size_multiples``): its input is restricted onto the latent
  grid exactly by slicing at multiples and interpolated otherwise, and the program holds the slicing
  branch, so it takes every multiple (16, 32, 48, ... for a 16x16 latent grid) and refuses other sizes
  with a guard error (eager mode interpolates them).
* MANO: its pyramid (level count, level sizes, windows) is computed in Python from the grid size. With
  ``window_fraction`` it declares ``export_size_multiple`` ``M`` (e.g. 4 for ``window_fraction=0.25`` and
  ``pool_factor=2``) and ``export_size_range`` ``[2M, None]``: every size ``n = K·M``, ``K >= 2``, has the
  pyramid of ``M`` scaled by ``K`` (same level count, exact pooling, windows ``K`` times larger tiling every
  level), so the program computes it in symbolic integers and takes every such size (other sizes fail a
  guard; eager mode pads them). ``K = 1`` is left out: windows of one cell would be size-1 axes, which
  torch.export specialises. ``coarse_cells``, ``lift_spacing = p/q`` and ``head_grid`` enlarge ``M`` (lcm with
  the level-1 size, ``q`` and the head grid) and may raise the minimum: the shipped darcy64_mano config takes
  every multiple of 64 from 64 on (levels ``n, 32, 16, 8``; stencil shift ``n/64`` cells). Other configurations
  (``window`` in cells; a fraction whose windows do not tile the levels) are exported at one resolution
  (batch dynamic), with the reason in the note; a declared multiple whose program fails the probe falls
  back to that too.
* Sphere operators (``spherical_transformer``, ``planar_transformer``): the operator runs on any grid
  whose ``nlon`` is a multiple or a divisor of its internal grid's, with the same weights, but a program
  holds the neighbourhood CSR and quadrature of one ``nlat x nlon`` grid (built in Python), so it runs on
  that grid only; the batch is dynamic. ``example_shape=(nlat, nlon)`` (CLI ``--shape NLATxNLON``)
  exports on another grid (the model's :meth:`on_grid` copy: same weights, internal grid and radii);
  the default is the training grid. Export once per grid.
* Point sets: ``N`` is dynamic. Erwin and BSA build ball trees whose depth depends on ``N`` (and
  ``sciattn.balltree`` uses ``torch.gather(out=)``, which torch.export cannot trace with symbolic
  sizes), so their program pads the cloud in the graph to a capacity of ``max_points + 1`` points
  (padding is masked and never changes the real points: the operators' contract) and accepts any
  ``1 <= N <= max_points`` (default ``max_points``: the training cloud size); their batch is fixed
  at the example's (default 1). Operators without trees get dynamic ``N`` and batch directly.

Dtypes. torch.export fixes the input dtype of a program. ``input_dtype`` (default: the dtype the
training data stored, e.g. ``bool`` for neuraloperator's Darcy files, else ``float32``) is that
dtype; ``bool``, integer and ``float64`` inputs are cast inside the program to the model's dtype
(float32), so a program exported for the file's dtype takes the file's arrays as they are. Export
again with ``input_dtype=`` for another dtype. ``pos`` and ``weights`` are float32 and ``mask`` bool.

The program checks its input: a non-finite ``x`` raises ``RuntimeError: x: expected finite values at real
points (...), got NaN or Inf`` (an ``aten._assert_async`` in the graph; torch.export keeps the message), and a
wrong shape fails the program's shape guards (torch's wording, e.g. ``Guard failed: x.size()[1] == 1``, also for
a wrong rank).

Loading. Plain ``torch.export.load(path).module()`` works without sciattn and gives torch's own guard messages.
``load_program(path)`` (sciattn needed; :mod:`.program`, re-exported here) reads the spec ``export_run`` stores in the program (the extra file
``sciattn_spec.json``: ``export_run``'s result without ``path``, written in the same atomic write) and returns a
callable that checks rank, channels, dtype, spatial sizes (fixed sizes, multiples, minimum) or point counts
(``<= max_points``) and finiteness at real points, each a one-line ``ValueError``/``TypeError`` naming the
argument, what was expected and what was given, before running the program.

How: sciattn's input checks become in-graph ``torch._assert_async`` assertions under tracing
(``torch.compiler.is_compiling()``), sizes stay symbolic, and one eager call warms sciattn's
geometry caches before tracing (so they never hold tracing tensors). The one thing patched, for the
duration of the export only (module-global, not thread-safe), is tensorly's einsum: neuraloperator
switches it to an opt-einsum plugin that plans contractions from concrete shapes, and the export
uses plain ``torch.einsum`` instead; it is restored afterwards, also on error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sciattn._checks import check_choice
from sciattn._io import atomic_path
from sciattn.operators.contract import Operator

from ..datasets.run_metadata import read_data_meta
from ..training.checkpoint import load_model
from .program import SPEC_FILE, LoadedProgram, _first_line, load_program

__all__ = ["export_run", "load_program", "LoadedProgram", "ExportedOperator", "ExportedPointOperator", "FORMATS",
           "INPUT_DTYPES", "onnx_missing"]

FORMATS = ("torch-export", "onnx")
INPUT_DTYPES = {"bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
                "int32": torch.int32, "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float32": torch.float32, "float64": torch.float64}
# The in-graph finiteness checks' messages (torch.export keeps an assert's message in the program).
GRID_FINITE_MESSAGE = ("x: expected finite values at real points (every grid point of x, after the cast to the model's "
                       "dtype), got NaN or Inf")
POINT_FINITE_MESSAGE = "x: expected finite values at real points (mask True), got NaN or Inf"
# The spec export_run records in a torch-export program is the extra file SPEC_FILE (.program), read by load_program.


def onnx_missing() -> list[str]:
    """The packages ``format="onnx"`` needs that are not installed."""
    return [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]


class ExportedOperator(nn.Module):
    """``y_normalizer.decode(model(x_normalizer.encode(x)))`` as one module, with the cast of ``x`` to the
    model's dtype and an in-graph finiteness check."""

    def __init__(self, model: nn.Module, x_normalizer: nn.Module, y_normalizer: nn.Module,
                 dtype: torch.dtype = torch.float32):
        super().__init__()
        self.model, self.x_normalizer, self.y_normalizer = model, x_normalizer, y_normalizer
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)
        torch._assert_async(torch.isfinite(x).all(), GRID_FINITE_MESSAGE)
        return self.y_normalizer.decode(self.model(self.x_normalizer.encode(x)))


class ExportedPointOperator(nn.Module):
    """The point-set pipeline ``(x, pos, weights, mask) -> y``; features are normalised channels first.

    With ``capacity`` the cloud is padded in the graph to ``capacity`` points (masked, zero weight) and the
    prediction sliced back to the input's ``N``, so the operator itself traces at a static size.
    """

    def __init__(self, model: nn.Module, x_normalizer: nn.Module, y_normalizer: nn.Module,
                 dtype: torch.dtype = torch.float32, capacity: int | None = None):
        super().__init__()
        self.model, self.x_normalizer, self.y_normalizer = model, x_normalizer, y_normalizer
        self.dtype, self.capacity = dtype, capacity

    def forward(self, x: torch.Tensor, pos: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x, pos, weights, mask = x.to(self.dtype), pos.to(self.dtype), weights.to(self.dtype), mask.to(torch.bool)
        torch._assert_async((torch.isfinite(x).all(-1) | ~mask).all(), POINT_FINITE_MESSAGE)
        n = x.shape[1]
        if self.capacity is not None:
            extra = self.capacity - n
            x = nn.functional.pad(x, (0, 0, 0, extra))
            pos = nn.functional.pad(pos, (0, 0, 0, extra))
            weights = nn.functional.pad(weights, (0, extra))
            mask = nn.functional.pad(mask, (0, extra), value=False)
        h = self.x_normalizer.encode(x.transpose(1, 2)).transpose(1, 2)
        out = self.model(h, pos=pos, mask=mask, weights=weights)
        out = self.y_normalizer.decode(out.transpose(1, 2)).transpose(1, 2)
        return out[:, :n] if self.capacity is not None else out


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


def _check_ints(arg: str, shape: Sequence[Any]) -> list[int]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"{arg}: expected a sequence of ints, got {type(shape).__name__}")
    shape = list(shape)
    if not shape or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise ValueError(f"{arg}: expected positive ints, got {tuple(shape)}")
    return shape


def _example_shape(example_shape, meta, in_channels: int, spatial_dims: int) -> tuple[int, list[int]]:
    """``(batch, spatial)`` from ``example_shape`` (spatial, (C, *spatial) or (B, C, *spatial)) or the run."""
    d = spatial_dims
    if example_shape is None:
        res = meta.get("train_resolution")
        if res is None or len(res) != d:
            raise ValueError(
                f"example_shape: the run records no training resolution with {d} axes; pass example_shape="
                f"(S_1, ..., S_{d}) or (B, C_in, S_1, ..., S_{d})"
            )
        return 1, [int(n) for n in res]
    shape = _check_ints("example_shape", example_shape)
    if len(shape) not in (d, d + 1, d + 2):
        raise ValueError(
            f"example_shape: expected {d} spatial sizes, (C_in, *spatial) or (B, C_in, *spatial), got {tuple(shape)}"
        )
    if len(shape) > d and shape[-d - 1] != in_channels:
        raise ValueError(f"example_shape: expected C_in = {in_channels} input channels, got {shape[-d - 1]}")
    return (shape[0] if len(shape) == d + 2 else 1), shape[-d:]


def _point_example(example_shape, meta, in_channels: int) -> tuple[int, int]:
    """``(batch, N)`` from ``example_shape`` ((N,), (N, C_in) or (B, N, C_in)) or the run's training N."""
    if example_shape is None:
        res = meta.get("train_resolution")
        if not (isinstance(res, list) and len(res) == 1):
            raise ValueError("example_shape: the run records no training cloud size; pass example_shape=(N,) or "
                             "(B, N, C_in)")
        return 1, int(res[0])
    shape = _check_ints("example_shape", example_shape)
    if len(shape) not in (1, 2, 3):
        raise ValueError(f"example_shape: expected (N,), (N, C_in) or (B, N, C_in) for a point-set operator, got "
                         f"{tuple(shape)}")
    if len(shape) > 1 and shape[-1] != in_channels:
        raise ValueError(f"example_shape: expected C_in = {in_channels} input channels, got {shape[-1]}")
    return (shape[0] if len(shape) == 3 else 1), shape[-2] if len(shape) > 1 else shape[0]


def _input_dtype(input_dtype, meta) -> torch.dtype:
    if input_dtype is None:
        input_dtype = meta.get("input_dtype") or "float32"
        if str(input_dtype).removeprefix("torch.") not in INPUT_DTYPES:
            input_dtype = "float32"
    if isinstance(input_dtype, torch.dtype):
        if input_dtype not in INPUT_DTYPES.values():
            raise ValueError(f"input_dtype: expected one of {list(INPUT_DTYPES)}, got {input_dtype}")
        return input_dtype
    name = str(input_dtype).removeprefix("torch.")
    check_choice("input_dtype", name, tuple(INPUT_DTYPES))
    return INPUT_DTYPES[name]


def _random(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(*shape, generator=gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0, 4, tuple(shape), generator=gen).to(dtype)
    return torch.randn(*shape, generator=gen).to(dtype)


def _distinct(values: Sequence[int], avoid: set[int]) -> list[int]:
    """``values`` bumped so that no two (and none of ``avoid``) are equal: equal example sizes can be unified."""
    out: list[int] = []
    for v in values:
        while v in avoid or v in out:
            v += 1
        out.append(v)
    return out


def _probe(program, module: nn.Module, args, format: str) -> str | None:
    """Run ``program`` on ``args`` (sizes other than the traced ones) against the eager ``module``: ``None`` when
    it runs and agrees, else why not. ONNX programs are not run (that needs onnxruntime)."""
    if format != "torch-export":
        return None
    args = args if isinstance(args, tuple) else (args,)
    try:
        got = program.module()(*args)
    except Exception as err:  # noqa: BLE001 - a failed guard is an AssertionError or RuntimeError
        return f"at input shape {tuple(args[0].shape)}: {_first_line(err)[:200]}"
    ref = module(*args)
    diff = float((got - ref).abs().max())
    scale = max(1.0, float(ref.abs().max()))
    return None if diff <= 1e-4 * scale else f"at input shape {tuple(args[0].shape)}: differs by {diff:.3g}"


def _ranges(program, example: torch.Tensor, dynamic: list[int]) -> dict[str, list[int | None]]:
    out = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in program.graph_signature.user_inputs:
            shape = node.meta["val"].shape
            for axis in dynamic:
                expr = shape[axis].node.expr
                vr = program.range_constraints.get(expr)
                if vr is not None:
                    lo, hi = vr.lower, vr.upper
                    finite = str(hi) not in ("oo", "int_oo") and bool(getattr(hi, "is_finite", True))
                    out[str(axis)] = [int(lo), int(hi) if finite else None]
            break
    return out


def _size_multiple(model: Operator, d: int) -> tuple[int, ...] | None:
    """The operator's ``export_size_multiple`` (an int or ``d`` positive ints): traced spatial sizes are
    declared as multiples of it; ``None`` when it has none."""
    m = model.export_size_multiple
    if m is None:
        return None
    m = (m,) * d if isinstance(m, int) else tuple(m)
    if len(m) != d or not all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in m):
        raise ValueError(f"export_size_multiple: expected an int or {d} positive ints, got {m!r}")
    return m


def _size_range(model: Operator, multiple: tuple[int, ...] | None) -> list[int] | None:
    """The smallest multiple ``K_min`` per axis from the operator's ``export_size_range`` (``[(lo, hi), ...]``,
    ``hi`` None: unbounded; only ``lo`` is read), default 1."""
    rng = model.export_size_range
    if rng is None or multiple is None:
        return None if multiple is None else [1] * len(multiple)
    return [max(1, -(-int(lo) // m)) for (lo, _), m in zip(rng, multiple)]


def _trace_error(name: str, shape, err: Exception) -> RuntimeError:
    return RuntimeError(
        f"export: could not trace operator {name!r} at input shape {tuple(shape)} ({type(err).__name__}: "
        f"{_first_line(err)}); a data-dependent Python branch in the model, or an op the exporter does not "
        f"support, is the usual cause (full error chained below)"
    )


def export_run(
    run_dir: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    format: str = "torch-export",
    example_shape: Sequence[int] | None = None,
    dynamic_spatial: bool = True,
    input_dtype: str | torch.dtype | None = None,
    max_points: int | None = None,
) -> dict[str, Any]:
    """Write the run's ``encode -> operator -> decode`` pipeline to ``out_path`` (atomically).

    A torch-export file also holds the input spec (the returned dict without ``path``) as the extra file
    ``sciattn_spec.json``. Load it with plain ``torch.export.load(out_path).module()`` (no sciattn; torch's
    own guard messages for a bad shape) or with :func:`load_program` (sciattn's one-line input errors).

    Args:
        run_dir: run directory (or checkpoint file) written by ``sciattn train`` or the ``Trainer``.
        out_path: target file (``.pt2`` for torch-export, ``.onnx`` for ONNX by convention).
        format: ``"torch-export"`` or ``"onnx"``.
        example_shape: the example traced: for grids spatial sizes, ``(C_in, *spatial)`` or
            ``(B, C_in, *spatial)``; for point sets ``(N,)``, ``(N, C_in)`` or ``(B, N, C_in)``. Default:
            the run's training resolution. Dynamic dims accept other sizes; a fixed resolution is this one.
        dynamic_spatial: make spatial sizes (or N) dynamic where the operator allows it (``False``: only
            the batch is dynamic).
        input_dtype: the dtype of ``x`` the program takes (see the module docstring); default the
            training data's stored dtype, else ``float32``.
        max_points: point sets whose operator needs in-graph padding (Erwin, BSA): the largest ``N`` the
            program accepts (default: the larger of the training and example cloud sizes).

    Returns:
        ``{"format", "path", "kind" ("grid" | "sphere" | "points"), "input_names", "input_name": "x",
        "input_shape" (the traced example of ``x``), "input_dtype", "output_shape", "dynamic_dims" (axes of
        ``x`` that may vary), "dynamic_ranges" ({axis: [min, max or None]}), "size_multiples" ({axis: m}: the
        dynamic spatial sizes the program takes are the multiples of m), "fixed_resolution" (the spatial
        sizes the program requires, or ``None``), "max_points", "in_channels", "out_channels",
        "spatial_dims", "operator", "channel_names" ({"x": [...], "y": [...]}: the run's variable names of the input
        and output channels, ``in_k``/``out_k`` where it recorded none), "dt" (the run's time step or ``None``),
        "max_abs_diff_at_example" (program vs eager on the example), "note"}``. An ONNX file holds the same in
        its ``metadata_props`` (``sciattn_spec`` as JSON, ``input_channel_names``, ``output_channel_names``).
    """
    check_choice("format", format, FORMATS)
    if format == "onnx":
        missing = onnx_missing()
        if missing:
            raise ImportError(
                f"format='onnx': requires the {' and '.join(repr(m) for m in missing)} package(s), which are not "
                f"installed (pip install \"sciattn[onnx]\" or pip install {' '.join(missing)}); format='torch-export' "
                f"needs only torch"
            )
    if max_points is not None and (isinstance(max_points, bool) or not isinstance(max_points, int) or max_points < 1):
        raise ValueError(f"max_points: expected a positive int or None, got {max_points!r}")
    out_path = Path(out_path)
    if out_path.is_dir():
        raise IsADirectoryError(f"out_path: expected a file path, got the directory {str(out_path)!r}")
    model, xn, yn, state = load_model(run_dir, device="cpu")
    meta = read_data_meta(state, run_dir)
    name = str(state.get("operator"))
    policy = model.export_policy  # the operator's contract (sciattn.operators.contract)
    unsupported = model.export_unsupported_reason
    if unsupported:
        raise ValueError(f"export: operator {name!r} of {str(run_dir)!r} cannot be exported: {unsupported}")
    domain = meta.get("domain") if isinstance(meta.get("domain"), dict) else {}
    points = model.input_kind == "points" or domain.get("kind") == "point_cloud"
    dtype = _input_dtype(input_dtype, meta)
    params = [p for p in model.parameters() if p.is_floating_point()]
    compute = params[0].dtype if params else torch.float32
    d = int(model.spatial_dims)
    config = model.config
    c_in, c_out = (int(getattr(model, k, None) or config.get(k) or len(config.get("variables") or [])) or 1
                   for k in ("in_channels", "out_channels"))
    if format == "onnx":
        complex_params = [n for n, p in model.named_parameters() if p.is_complex()]
        if complex_params:
            raise ValueError(
                f"format='onnx': torch.onnx cannot convert complex-valued parameters, and this operator has "
                f"{len(complex_params)} (e.g. {complex_params[0]!r}, from the spectral regressor); use "
                f"format='torch-export', or train with regressor='pointwise' for ONNX"
            )
    gen = torch.Generator().manual_seed(0)
    from torch.export import Dim

    if format == "torch-export":
        def tracer(mod, args, dynamic_shapes):
            return torch.export.export(mod, args, dynamic_shapes=dynamic_shapes)
    else:
        def tracer(mod, args, dynamic_shapes):
            names = ["x", "pos", "weights", "mask"][:len(args)]
            return torch.onnx.export(mod, args, dynamo=True, dynamic_shapes=dynamic_shapes, input_names=names,
                                     output_names=["y"], external_data=False, verbose=False)

    notes: list[str] = []
    capacity = None
    with torch.no_grad(), _traceable():
        if points:
            batch, n = _point_example(example_shape, meta, c_in)
            train_n = meta.get("train_resolution") if isinstance(meta.get("train_resolution"), list) else [n]
            module = ExportedPointOperator(model, xn, yn, compute).eval()

            def example_args(b, n_pts):
                x = _random((b, n_pts, c_in), dtype, gen)
                pos = torch.rand(b, n_pts, d, generator=gen)
                return x, pos, torch.ones(b, n_pts), torch.ones(b, n_pts, dtype=torch.bool)

            program = None
            if dynamic_spatial and policy.padded_points is None:
                b, n1 = _distinct([max(batch, 2), max(n, 2)], {c_in, d})
                args = example_args(b, n1)
                B, N = Dim("batch", min=1, max=1 << 16), Dim("n", min=1, max=1 << 24)
                module(*args)
                try:
                    program = tracer(module, args, tuple({0: B, 1: N} for _ in args))
                    why = _probe(program, module, example_args(b + 1, n1 + 3), format)
                except Exception as err:  # noqa: BLE001 - torch raises many types; fall back to padding
                    why = f"{type(err).__name__}: {_first_line(err)[:200]}"
                if why is not None:
                    program = None
                    notes.append(f"direct dynamic N failed ({why})")
            if program is None:
                cap_n = max_points if max_points is not None else max(int(train_n[0]), n)
                if n > cap_n:
                    raise ValueError(f"max_points: expected at least the example's N = {n}, got {cap_n}")
                module.capacity = capacity = cap_n + 1
                n1 = min(n, cap_n)
                args = example_args(batch, n1)
                N = Dim("n", min=1, max=cap_n)
                module(*args)
                try:
                    program = tracer(module, args, tuple({1: N} for _ in args) if dynamic_spatial else None)
                except Exception as err:  # noqa: BLE001
                    raise _trace_error(name, args[0].shape, err) from err
                if dynamic_spatial:
                    failed = _probe(program, module, example_args(batch, n1 - 1 if n1 > 1 else n1 + 1), format)
                    if failed is not None:
                        raise RuntimeError(f"export: operator {name!r} traced with in-graph padding, but the program "
                                           f"fails at another N ({failed})")
                why = policy.padded_points or "direct dynamic N could not be traced"
                notes.append(f"N is dynamic (1 <= N <= {cap_n}) by padding the cloud in the graph to {capacity} "
                             f"points; the batch is fixed at {batch}: {why}")
                dynamic = [1] if dynamic_spatial else []
            else:
                dynamic = [0, 1]
                notes.append("batch and N are dynamic")
            example = args[0]
            eager_args = args
            kind, fixed = "points", None
            multiples = {}
        else:
            batch, spatial = _example_shape(example_shape, meta, c_in, d)
            fixed_why = policy.fixed_grid
            if model.input_kind == "sphere" and tuple(spatial) != tuple(model.shape):  # on another grid
                built_at = model.shape
                model = model.on_grid(*spatial)  # the same weights on that grid's geometry
                notes.append(f"exported on the grid {spatial[0]}x{spatial[1]} with the weights of the model built "
                             f"at {built_at[0]}x{built_at[1]} (internal grid {model.inner_shape[0]}x"
                             f"{model.inner_shape[1]})")
            fixed_reason = model.export_fixed_reason  # the operator knows it holds one grid
            dyn_spatial = dynamic_spatial and fixed_why is None and fixed_reason is None
            module = ExportedOperator(model, xn, yn, compute).eval()

            multiple = _size_multiple(model, d)
            kmin = _size_range(model, multiple)

            def attempt(spatial_dynamic: bool):
                avoid = {c_in} | (set() if spatial_dynamic else set(spatial))
                if spatial_dynamic and multiple is not None:
                    # sizes m_i * K_i, traced at K_i >= 2 (distinct, so no two axes are unified)
                    ks = _distinct([max(2, lo, -(-s // m)) for s, m, lo in zip(spatial, multiple, kmin)], set())
                    sizes = [k * m for k, m in zip(ks, multiple)]
                    b = _distinct([max(batch, 2)], avoid | set(sizes))[0]
                    # n = m * (K - 1) with K >= 2: torch.export takes a root dim to be >= 2, and K - 1 = 1 (the
                    # multiple itself) must be in range; K - 1 >= kmin where the operator declares a lower bound
                    space = {2 + i: m * Dim(f"k{i}", min=lo + 1) - m for i, (m, lo) in enumerate(zip(multiple, kmin))}
                else:
                    b = _distinct([max(batch, 2)], avoid)[0]
                    sizes = _distinct([max(s, 2) for s in spatial], {b, c_in}) if spatial_dynamic else list(spatial)
                    space = {2 + i: Dim.AUTO for i in range(d)} if spatial_dynamic else {}
                example = _random((b, c_in, *sizes), dtype, gen)
                module(example)  # eager once: fills sciattn's geometry caches with real tensors, not tracing ones
                dyn = {0: Dim.AUTO, **space}
                try:
                    return tracer(module, (example,), (dyn,)), example
                except Exception as err:  # noqa: BLE001 - torch raises many types
                    raise _trace_error(name, example.shape, err) from err

            spatial_failed = None
            try:
                program, example = attempt(dyn_spatial)
            except RuntimeError as err:
                if not (dyn_spatial and multiple is not None):
                    raise
                spatial_failed = f"tracing with dynamic sizes failed: {_first_line(err)[:200]}"
                program, example = attempt(False)
            b, sizes = example.shape[0], list(example.shape[2:])
            if dyn_spatial and spatial_failed is None:  # a dim can stay symbolic yet be pinned by a guard: run it
                if multiple is None:
                    probes = [[n + 3 for n in sizes]]
                else:  # the next multiples, and the smallest (K = 1: the latent grid, no resampling)
                    probes = [[n + m for n, m in zip(sizes, multiple)], [m * lo for m, lo in zip(multiple, kmin)]]
                for probe in probes:
                    spatial_failed = _probe(program, module, _random((b, c_in, *probe), dtype, gen), format)
                    if spatial_failed is not None:
                        break
                if spatial_failed is not None:
                    program, example = attempt(False)
            batch_failed = _probe(program, module, _random((b + 1, c_in, *example.shape[2:]), dtype, gen), format)
            dynamic = ([] if batch_failed else [0]) + ([2 + i for i in range(d)] if dyn_spatial and not spatial_failed
                                                        else [])
            fixed = None if dynamic[-1:] == [2 + d - 1] else [int(n) for n in example.shape[2:]]
            kind = "sphere" if model.input_kind == "sphere" else "grid"
            multiples = {} if fixed is not None or multiple is None else {str(2 + i): m for i, m in enumerate(multiple)}
            if fixed is None:
                notes.append("batch and spatial dims are dynamic" if 0 in dynamic else
                             f"spatial dims are dynamic; the batch is fixed at {b} ({batch_failed})")
                if multiples:
                    notes.append(f"spatial sizes are multiples of {tuple(multiple)} (operator {name!r}: "
                                 f"{policy.multiple or 'it declares export_size_multiple'}; see size_multiples)")
            else:
                reason = fixed_why or ("dynamic_spatial=False" if not dynamic_spatial else None) or (
                    None if multiple is not None else (fixed_reason or policy.specialised)) or (
                    f"tracing fixed the sizes ({spatial_failed}): the operator computes something in Python from "
                    f"the input size")
                notes.append(f"spatial dims are fixed at {tuple(fixed)} for operator {name!r}: {reason}; export "
                             f"again (example_shape=) for another resolution")
                notes.append("the batch dim is dynamic" if 0 in dynamic else f"the batch dim is fixed too ({batch_failed})")
            eager_args = (example,)
        expected = module(*eager_args)
        if format == "torch-export":
            got = program.module()(*eager_args)
            check = float((got - expected).abs().max())
        else:
            check = None
            notes.append("ONNX: the dynamic dims are those requested; they were not checked by running the model "
                         "(that needs onnxruntime)")

    shape = list(example.shape)
    out_shape = [shape[0], shape[1], c_out] if points else [shape[0], c_out, *shape[2:]]
    info = {
        "format": format,
        "path": str(out_path),
        "kind": kind,
        "input_names": ["x", "pos", "weights", "mask"] if points else ["x"],
        "input_name": "x",
        "input_shape": shape,
        "input_dtype": str(dtype).removeprefix("torch."),
        "output_shape": out_shape,
        "dynamic_dims": dynamic,
        "dynamic_ranges": _ranges(program, example, dynamic) if format == "torch-export" else {},
        "size_multiples": multiples,
        "fixed_resolution": fixed,
        "max_points": None if capacity is None else capacity - 1,
        "in_channels": c_in,
        "out_channels": c_out,
        "spatial_dims": d,
        "operator": name,
        "channel_names": _channel_names(meta, c_in, c_out),
        "dt": meta.get("dt") if isinstance(meta.get("dt"), (int, float)) else None,
        "max_abs_diff_at_example": check,
        "note": "; ".join(notes),
    }
    with atomic_path(out_path) as tmp:
        if format == "torch-export":
            buf = io.BytesIO()  # torch.export.save wants a ".pt2" name or a buffer; the temporary file has neither
            spec = {k: v for k, v in info.items() if k != "path"}
            torch.export.save(program, buf, extra_files={SPEC_FILE: json.dumps(spec)})
            tmp.write_bytes(buf.getvalue())
        else:
            _onnx_metadata(program, {k: v for k, v in info.items() if k != "path"})
            program.save(str(tmp), external_data=False)
    return info


def _channel_names(meta: dict[str, Any], c_in: int, c_out: int) -> dict[str, list[str]]:
    """``{"x": [...], "y": [...]}``: the run's variable names of the program's input and output channels (a time
    stepper's outputs are its frames' variables), ``in_k`` / ``out_k`` where the run recorded none (as
    :class:`~.surrogate.Surrogate` names them)."""
    variables = meta.get("variables") if isinstance(meta.get("variables"), dict) else {}
    frames = meta.get("frame_variables")
    if isinstance(frames, list) and frames:
        from ..datasets.data import stepper_names

        named = stepper_names([str(f) for f in frames], c_in, c_out) or {}
        variables = {**named, **{k: v for k, v in variables.items() if len(v or []) == (c_in if k == "x" else c_out)}}
    out = {}
    for key, n, prefix in (("x", c_in, "in"), ("y", c_out, "out")):
        names = variables.get(key)
        ok = isinstance(names, list) and len(names) == n and all(isinstance(v, str) for v in names)
        out[key] = [str(v) for v in names] if ok else [f"{prefix}_{i}" for i in range(n)]
    return out


def _onnx_metadata(program: Any, spec: dict[str, Any]) -> None:
    """Store ``spec`` in the ONNX model's ``metadata_props``: ``sciattn_spec`` (the whole spec as JSON, as the
    ``.pt2`` holds it) and ``input_channel_names`` / ``output_channel_names`` (comma-separated variable names), so
    an ONNX runtime user reads what each channel of ``x`` and ``y`` is."""
    model = getattr(program, "model", None)
    props = getattr(model, "metadata_props", None)
    if props is None:
        return
    props["sciattn_spec"] = json.dumps(spec)
    props["input_channel_names"] = ",".join(spec["channel_names"]["x"])
    props["output_channel_names"] = ",".join(spec["channel_names"]["y"])
