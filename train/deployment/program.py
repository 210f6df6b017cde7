"""Load a program written by :func:`~.export.export_run` with sciattn's input checks in front.

:func:`load_program` reads the ``.pt2`` (``torch.export.load``) and the input spec ``export_run`` stored beside the
program (the extra file :data:`SPEC_FILE`), and returns a :class:`LoadedProgram`: calling it checks each input
against the spec (type, rank, channels, dtype, spatial sizes or point counts, finiteness at real points) with a
one-line error naming the argument, then runs the plain program. Grid programs take ``x`` ``(B, C_in, *spatial)``;
point-set programs take ``x`` ``(B, N, C_in)``, ``pos`` ``(B, N, d)``, ``weights`` ``(B, N)`` and ``mask``
``(B, N)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["load_program", "LoadedProgram", "SPEC_FILE"]

#: the extra file of a ``.pt2`` that holds the input spec ``export_run`` recorded
SPEC_FILE = "sciattn_spec.json"


def _first_line(err: Exception) -> str:
    return next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)


def _shape_str(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


class LoadedProgram:
    """An exported program with sciattn's input checks in front (:func:`load_program`).

    ``program(x)`` (grids) or ``program(x, pos, weights, mask)`` (point sets) checks every input against the
    spec ``export_run`` recorded (type, rank, channels, dtype, sizes, finiteness at real points), raising a
    one-line ``TypeError``/``ValueError`` that names the argument, what was expected and what was given,
    then calls the plain program (``module``), whose weights are frozen (the output requires a gradient only
    when an input does). ``spec`` is that record (``export_run``'s result without ``path``).
    """

    def __init__(self, module: nn.Module, spec: dict[str, Any], path: str):
        for p in module.parameters():  # a deployed program's weights are frozen: outputs need no .detach(), and
            p.requires_grad_(False)    # gradients with respect to inputs that require them still flow
        self.module, self.spec, self.path = module, spec, path

    def __repr__(self) -> str:
        return f"LoadedProgram({self.path!r}, operator={self.spec.get('operator')!r}, kind={self.spec.get('kind')!r})"

    def __call__(self, *args: torch.Tensor) -> torch.Tensor:
        self.check(*args)
        return self.module(*args)

    def check(self, *args: torch.Tensor) -> None:
        """Raise the loader's one-line error for the first input that does not fit the spec."""
        spec = self.spec
        names = list(spec.get("input_names") or ["x"])
        if len(args) != len(names):
            raise TypeError(f"program: expected {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
        for name, value in zip(names, args):
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
        if spec.get("kind") == "points":
            self._check_points(*args)
        else:
            self._check_grid(args[0])

    def _dtype(self, name: str, value: torch.Tensor, expected: str, hint: str = "") -> None:
        if str(value.dtype).removeprefix("torch.") != expected:
            hint = hint or f" (cast it with .to(torch.{expected}))"
            raise TypeError(f"{name}: expected dtype {expected}{hint}, got {str(value.dtype).removeprefix('torch.')}")

    def _batch(self, x: torch.Tensor) -> None:
        spec = self.spec
        if 0 not in spec.get("dynamic_dims", []) and x.shape[0] != spec["input_shape"][0]:
            raise ValueError(f"x: expected batch size {spec['input_shape'][0]} along axis 0 (the program's batch is "
                             f"fixed), got {x.shape[0]} (shape {_shape_str(x)})")

    def _finite(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        if x.is_floating_point() or x.is_complex():
            from sciattn._checks import check_finite

            check_finite("x", x, mask)

    def _check_grid(self, x: torch.Tensor) -> None:
        spec = self.spec
        d, c_in = int(spec["spatial_dims"]), int(spec["in_channels"])
        axes = ", ".join(f"S_{i + 1}" for i in range(d))
        if x.dim() != d + 2:
            raise ValueError(f"x: expected a {d + 2}-d tensor (B, C_in, {axes}) for this {d}-d grid operator, got "
                             f"{x.dim()}-d shape {_shape_str(x)}")
        if x.shape[1] != c_in:
            raise ValueError(f"x: expected C_in = {c_in} input channels along axis 1, got {x.shape[1]} "
                             f"(shape {_shape_str(x)})")
        self._dtype("x", x, spec["input_dtype"], " (the program's input dtype; export again for another: export_run(..., "
                                                 "input_dtype=...) or sciattn export --dtype ...)")
        self._batch(x)
        spatial = tuple(x.shape[2:])
        fixed = spec.get("fixed_resolution")
        if fixed is not None and list(spatial) != list(fixed):
            raise ValueError(f"x: expected the spatial sizes {tuple(fixed)} (the program is exported at one "
                             f"resolution; export again for another: export_run(..., example_shape=...) or sciattn export "
                             f"--shape HxW), got {spatial}")
        multiples = spec.get("size_multiples") or {}
        ranges = spec.get("dynamic_ranges") or {}
        for i, n in enumerate(spatial):
            axis = str(2 + i)
            m = multiples.get(axis)
            if m is not None and n % int(m):
                raise ValueError(f"x: expected a multiple of {m} along axis {axis} (spatial sizes must be multiples "
                                 f"of {tuple(multiples.values())}), got {n} (shape {_shape_str(x)})")
            lo, hi = (ranges.get(axis) or [None, None])
            if lo is not None and n < lo or hi is not None and n > hi:
                within = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
                raise ValueError(f"x: expected a size {within} along axis {axis}, got {n} (shape {_shape_str(x)})")
        self._finite(x)

    def _check_points(self, x, pos, weights, mask) -> None:
        spec = self.spec
        d, c_in = int(spec["spatial_dims"]), int(spec["in_channels"])
        if x.dim() != 3:
            raise ValueError(f"x: expected a 3-d tensor (B, N, C_in) for a point-set operator, got {x.dim()}-d "
                             f"shape {_shape_str(x)}")
        if x.shape[2] != c_in:
            raise ValueError(f"x: expected C_in = {c_in} input channels along axis 2, got {x.shape[2]} "
                             f"(shape {_shape_str(x)})")
        b, n = x.shape[0], x.shape[1]
        for name, value, want, what in (("pos", pos, (b, n, d), f"(B, N, {d})"), ("weights", weights, (b, n), "(B, N)"),
                                        ("mask", mask, (b, n), "(B, N)")):
            if tuple(value.shape) != want:
                raise ValueError(f"{name}: expected shape {what} = {want} matching x {_shape_str(x)}, got "
                                 f"{_shape_str(value)}")
        self._dtype("x", x, spec["input_dtype"], " (the program's input dtype; export again for another: export_run(..., "
                                                 "input_dtype=...) or sciattn export --dtype ...)")
        self._dtype("pos", pos, "float32")
        self._dtype("weights", weights, "float32")
        self._dtype("mask", mask, "bool")
        self._batch(x)
        max_points = spec.get("max_points")
        if n < 1 or max_points is not None and n > max_points:
            raise ValueError(f"x: expected 1 <= N <= {max_points if max_points is not None else 'any'} points along "
                             f"axis 1 (export again for larger clouds: export_run(..., max_points=...) or sciattn "
                             f"export --max-points N), got N = {n} (shape {_shape_str(x)})")
        self._finite(x, mask[..., None])


def load_program(path: str | os.PathLike) -> LoadedProgram:
    """Load a ``.pt2`` written by :func:`export_run` with sciattn's input checks in front.

    Returns a :class:`LoadedProgram`: calling it checks rank, channels, dtype, spatial sizes (fixed sizes,
    multiples, minimum) or point counts (``<= max_points``) and finiteness against the spec ``export_run``
    stored in the program (an extra file, ``sciattn_spec.json``), with one-line ``ValueError``/``TypeError``
    messages naming the argument, then runs the program. Plain ``torch.export.load(path).module()`` runs the
    same program without sciattn, with torch's own guard messages instead.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: expected a .pt2 file written by export_run, got {str(path)!r} (no such file)")
    extra = {SPEC_FILE: ""}
    try:
        with path.open("rb") as f:  # a file object: torch warns about a file name without the .pt2 suffix
            program = torch.export.load(f, extra_files=extra)
    except Exception as err:  # noqa: BLE001 - torch raises many types for a file that is not a program
        raise ValueError(f"path: expected a torch.export program (.pt2), could not load {str(path)!r} "
                         f"({type(err).__name__}: {_first_line(err)[:200]})") from err
    if not extra[SPEC_FILE]:
        raise ValueError(f"path: {str(path)!r} holds no sciattn input spec (not written by export_run, or by an "
                         f"older sciattn); export it again (export_run or sciattn export), or load it with "
                         f"torch.export.load(path).module()")
    return LoadedProgram(program.module(), json.loads(extra[SPEC_FILE]), str(path))
