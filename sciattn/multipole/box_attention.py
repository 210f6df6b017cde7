r"""Box attention: the windowed softmax of the physical pyramid, every query over a box of key cells.

Every query cell ``i`` of the input grid ``n`` attends to the key cells of a level grid ``m`` inside a box
``y = start(i) + p`` (per axis ``a``: ``start_a[i_a] + p_a``, ``0 <= p_a < L_a``), each weighted by its key
weight ``ω_y`` and the window weight ``φ(i, y) = Π_a φ_a[i_a, p_a]``:

.. math::
    A(x_i) = \frac{\sum_p φ(i, y_p)\, ω_{y_p}\, e^{s(q_i, k_{y_p})}\, v_{y_p}}
                  {\sum_p φ(i, y_p)\, ω_{y_p}\, e^{s(q_i, k_{y_p})}}, \qquad s = \mathrm{scale}\; q \cdot k,

the quadrature of ``∫ φ(x, y) e^{s(q(x), k(y))} v(y) dy / ∫ φ(x, y) e^{s(q(x), k(y))} dy`` on the level's cells
(:mod:`sciattn.multipole.physical`). Boxes and per-axis weights come from
:func:`sciattn.multipole.geometry.axis_geometry` (tapered windows, hard windows, the global level, the local
near field). Keys of weight 0 (``log ω = -inf`` or ``φ = 0``) are excluded; a query without an admissible key
gets 0.

Backends, chosen per call (:func:`box_attention_backend`):

* ``cpu``: the fused C++ kernels (``csrc/``, built on first use by :mod:`._cpu_extension`) for CPU tensors in
  float32 or float64, as the custom operator ``sciattn::box_attention`` with its backward
  ``sciattn::box_attention_backward`` (registered autograd and fake implementations, checked with
  ``torch.library.opcheck``). Two strategies, chosen per level by :func:`lane_strides`: queries in the vector
  lanes (``csrc/query_lanes.cpp``; boxes that slide with the query: the local term and fine key grids) or keys
  in the lanes with boxes shared by runs of queries (``csrc/shared_boxes.cpp``; coarse key grids, the global
  level, sizes without lane structure; short runs share widened boxes, :data:`WIDEN_CELLS`);
* ``flex``: :func:`sciattn.multipole.box_flex.box_flex`, one flex attention per level with a block mask of the
  boxes (compiled on CUDA; chosen with ``backend="flex"``, on the layer ``MultipoleAttention(backend="flex")``);
* ``sdpa``: :func:`sciattn.multipole.physical.level_attention` (groups of queries against a halo of key cells
  through fused SDPA, masked to each query's window): any device and dtype, under ``torch.compile`` and
  ``torch.export``, and with any score bias (the kernels take the relative-position table,
  :class:`~sciattn.multipole.relative_bias.RelativePositionBias`).

All compute the same sums (float64: within 1e-14 relative of each other, tested).

Shapes (channels first, as the layer's projections produce them): ``q (B, H, D, *n)``; ``k, v (B, H, D, *m)``;
``logw (B, *m)``; returns ``(B, H, D, *n)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .._capabilities import has_flex_attention
from . import _cpu_extension
from .box_flex import box_flex
from .geometry import axis_geometry, box_starts, folded_axis_geometry, widened_axis_geometry
from .physical import level_attention, local_attention
from .relative_bias import RelativePositionBias, box_node_positions

__all__ = ["box_attention", "local_box_attention", "accumulate_box_attention", "box_attention_backend",
           "lane_strides", "BACKENDS"]

BACKENDS = ("cpu", "sdpa", "flex")
# The query-lane kernel beats the shared boxes when each residue class has at least MIN_LANES queries along the
# last axis, neighbouring lanes' keys are at most MAX_SLOPE cells apart and a key cell holds at most MAX_RUN
# queries (beyond, the shared boxes are loaded once for that many queries and the lane sets' strided query loads
# cost more); measured per level at 64² (batch 16), 256² and 512² (docs/benchmarks/kernels.md). With several
# queries per key cell (r >= 2) and a box of at least half the key axis, the clamped windows give the lane sets wide
# boxes and the shared boxes long runs: the shared boxes were faster forward+backward (mano's widths, batch 16: the
# 16-cell level at 32² 0.89x and at 64² 0.66x the lanes' time; the 32-cell level at 64², 3.2x, stays in lanes).
MIN_LANES, MAX_SLOPE, MAX_RUN = 16, 4, 4
# The shared-box kernel loads a box once per run of queries with one box start. Where the runs along an axis are
# short (fewer than WIDEN_BELOW queries per distinct box start on average), runs of queries whose boxes fit in
# WIDEN_CELLS more cells share one widened box (geometry.widened_axis_geometry). Measured by
# benchmarks/_box_widening.py (one level forward+backward, 4 heads x 14, 8-cell tapered windows, 2026-12-07):
# mean run 1.5 (85 inputs on 64 cells) 6.0x faster, 2.5 (141 on 64) 3.0x, 3.5 (85 on 32) 2.1x, 3.8 (211 on 64)
# 2.1x, 4 (32 on 16) 1.1x, 5.4 (300 on 64) 1.5x, 5.9 (141 on 32) 1.3x, 7.5 (421 on 64) 1.2x; at 8 or more no faster
# or slower (8: 64 on 16 0.88x; 9.1: 512 on 64 1.0x; 10.6: 85 on 16 0.81x; 32: 256 on 16 0.76x). Widths of 1 to 6
# cells were tried at a few of these sizes: 3 was best or within 10% of it.
WIDEN_BELOW, WIDEN_CELLS = 8, 3


def lane_strides(n2: int, m2: int, box2: int) -> tuple[int, int]:
    """``(a, r)`` for the query-lane kernel along the last axis (queries ``ρ + r t``, keys ``a t + const``), or
    ``(0, 0)`` for the shared-box kernel: a box that spans the whole axis is shared by every query, and sizes
    with fewer than :data:`MIN_LANES` queries per residue class, a key slope above :data:`MAX_SLOPE`, more than
    :data:`MAX_RUN` queries per key cell, or several queries per key cell with a box of half the key axis or more
    run faster with shared boxes."""
    g = math.gcd(n2, m2)
    a, r = m2 // g, n2 // g
    if box2 >= m2 or g < MIN_LANES or a > MAX_SLOPE or r > MAX_RUN or (r >= 2 and 2 * box2 >= m2):
        return 0, 0
    return a, r


def _geometry(n: Sequence[int], m: Sequence[int], window: Sequence[int], taper: bool, dtype, device,
              key_grid: Sequence[int] | None = None, radius: int = 0):
    """Tables of the three kernel axes (leading unused axes of size 1) and the kernel's lane strides:
    ``n3, m3, starts, logphi, (a, r), upos``. Axes where ``key_grid`` (the level's grid) is finer than the keys ``m``
    take the folded tables (:func:`_check_fold`); for the shared-box kernel (``a = 0``), axes with fewer than
    :data:`WIDEN_BELOW` queries per distinct box start take boxes widened by :data:`WIDEN_CELLS` so that runs of
    queries share them (:func:`~sciattn.multipole.geometry.widened_axis_geometry`). ``radius``: the relative-position
    bias's ``R`` (0: none); ``upos`` is then the per-axis node positions of the boxes' cells
    (:func:`~sciattn.multipole.relative_bias.box_node_positions`), else ``[]``."""
    fine = m if key_grid is None else key_grid
    axes = [(int(na), int(fa), int(ca), fa != ma) for na, ma, fa, ca in zip(n, m, fine, window)]
    tables = [folded_axis_geometry(na, fa, ca, taper, dtype, device) if folded
              else axis_geometry(na, fa, ca, taper, dtype, device) for na, fa, ca, folded in axes]
    pad = 3 - len(tables)
    n3, m3 = [1] * pad + [int(a) for a in n], [1] * pad + [int(a) for a in m]
    a, r = lane_strides(n3[2], m3[2], tables[-1].length)
    extras = [0] * len(tables)
    if not a and WIDEN_CELLS:
        extras = [WIDEN_CELLS if t.length < ka and na < WIDEN_BELOW * box_starts(na, fa, ca, taper, folded) else 0
                  for (na, fa, ca, folded), ka, t in zip(axes, [int(a) for a in m], tables)]
        tables = [widened_axis_geometry(na, fa, ca, taper, x, dtype, device, folded=folded) if x else t
                  for (na, fa, ca, folded), x, t in zip(axes, extras, tables)]
    upos = []
    if radius:
        zero = torch.zeros(1, 1, dtype=dtype, device=device)
        upos = [zero] * pad + [box_node_positions(na, fa, ca, taper, radius, x, dtype, device)
                               for (na, fa, ca, _), x in zip(axes, extras)]
    one = axis_geometry(1, 1, 1, False, dtype, device)
    tables = [one] * pad + tables
    return n3, m3, [t.start for t in tables], [t.logphi for t in tables], (a, r), upos


def _library():
    lib = _cpu_extension.load()
    if lib is None:  # pragma: no cover - the dispatcher checks availability first
        raise RuntimeError(f"box_attention: the CPU kernels are not available ({_cpu_extension.why_not()})")
    return lib


@torch.library.custom_op("sciattn::box_attention", mutates_args=())
def _box_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor, n: list[int],
                 m: list[int], starts: list[torch.Tensor], logphi: list[torch.Tensor], scale: float, a: int,
                 r: int, table: torch.Tensor | None, upos: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.empty_like(q)
    lse = q.new_empty(q.shape[0], q.shape[1], q.shape[3])
    if a:
        _library().lanes_forward(q, k, v, logw, n, m, starts, logphi, scale, a, r, table, upos, out, lse, None)
    else:
        _library().boxes_forward(q, k, v, logw, n, m, starts, logphi, scale, table, upos, out, lse, None)
    return out, lse


@_box_forward.register_fake
def _(q, k, v, logw, n, m, starts, logphi, scale, a, r, table, upos):
    return torch.empty_like(q), q.new_empty(q.shape[0], q.shape[1], q.shape[3])


@torch.library.custom_op("sciattn::box_attention_backward", mutates_args=())
def _box_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor, n: list[int],
                  m: list[int], starts: list[torch.Tensor], logphi: list[torch.Tensor], scale: float, a: int, r: int,
                  table: torch.Tensor | None, upos: list[torch.Tensor], out: torch.Tensor, lse: torch.Tensor,
                  grad: torch.Tensor, want_logw: bool
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # the query-lane kernel writes every key gradient, the shared boxes add into them; the table's gradient is
    # written per (batch, head) and summed over the batch here
    fresh = torch.empty_like if a else torch.zeros_like
    dq, dk, dv, dlogw = torch.empty_like(q), fresh(k), fresh(v), torch.zeros_like(logw)
    dtable = q.new_zeros(0) if table is None else q.new_zeros(q.shape[0], *table.shape)
    grad = grad.contiguous()
    if a:
        _library().lanes_backward(q, k, v, logw, n, m, starts, logphi, scale, a, r, table, upos, out, lse, grad, dq,
                                  dk, dv, dlogw if want_logw else None, None if table is None else dtable)
    else:
        _library().boxes_backward(q, k, v, logw, n, m, starts, logphi, scale, table, upos, out, lse, grad, dq, dk,
                                  dv, dlogw if want_logw else None, None if table is None else dtable)
    return dq, dk, dv, dlogw, (dtable if table is None else dtable.sum(0))


@_box_backward.register_fake
def _(q, k, v, logw, n, m, starts, logphi, scale, a, r, table, upos, out, lse, grad, want_logw):
    dtable = q.new_empty(0) if table is None else torch.empty_like(table)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(logw), dtable


def _setup_context(ctx, inputs, output):
    q, k, v, logw, n, m, starts, logphi, scale, a, r, table, upos = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, logw, out, lse, table, *starts, *logphi, *upos)
    ctx.args = (n, m, scale, a, r, len(upos))


def _backward(ctx, grad_out, grad_lse):
    q, k, v, logw, out, lse, table, *tables = ctx.saved_tensors
    n, m, scale, a, r, nu = ctx.args
    starts, logphi, upos = tables[:3], tables[3:6], tables[6:6 + nu]
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    want = bool(ctx.needs_input_grad[3])
    dq, dk, dv, dlogw, dtable = _box_backward(q, k, v, logw, n, m, starts, logphi, scale, a, r, table, upos, out,
                                              lse, grad_out, want)
    none3 = [None] * len(starts)
    return (dq, dk, dv, (dlogw if want else None), None, None, none3, list(none3), None, None, None,
            (dtable if table is not None and ctx.needs_input_grad[11] else None), [None] * nu)


_box_forward.register_autograd(_backward, setup_context=_setup_context)


def box_attention_backend(q: torch.Tensor, bias: Callable | None = None) -> tuple[str, str | None]:
    """``(backend, why)``: the backend a call with ``q`` (and a score ``bias`` or not: the kernels take a
    :class:`~sciattn.multipole.relative_bias.RelativePositionBias`, any other callable runs through SDPA) takes, and
    why the fused CPU kernels do not (``None`` when they do)."""
    if bias is not None and not isinstance(bias, RelativePositionBias):
        why = "a score bias other than the relative-position table runs through SDPA"
    elif q.device.type != "cpu":
        why = f"tensors on {q.device.type}, the kernels are CPU-only"
    elif q.dtype not in (torch.float32, torch.float64):
        why = f"dtype {q.dtype}, the kernels take float32 and float64"
    elif q.dim() >= 3 and q.shape[2] > 64:
        why = f"head dimension {q.shape[2]}, the kernels take at most 64"
    elif torch.compiler.is_compiling():
        why = "torch.compile / torch.export trace the SDPA path"
    elif any(not isinstance(s, int) for s in q.shape):
        why = "symbolic sizes trace the SDPA path"
    else:
        why = _cpu_extension.why_not()
    return ("sdpa", why) if why is not None else ("cpu", None)


def _choose(q, bias, backend, k=None, v=None):
    chosen, why = box_attention_backend(q, bias)
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS} or None, got {backend!r}")
        if backend == "cpu" and chosen != "cpu":
            raise ValueError(f"backend: 'cpu' does not apply to this call ({why})")
        if backend == "flex":
            if bias is not None:
                raise ValueError("backend: 'flex' takes no score bias (rel_pos_bias runs through None or 'sdpa')")
            if not has_flex_attention():
                raise ValueError("backend: 'flex' needs torch.nn.attention.flex_attention, not available here")
            if q.device.type == "cpu" and torch.is_grad_enabled() and any(
                    t is not None and t.requires_grad for t in (q, k, v)):
                raise ValueError("backend: 'flex' has no backward on the CPU (FlexAttention's); use None or 'sdpa'")
        chosen = backend
    return chosen


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``(B, H, D, *n) -> (B, *n, H, D)``."""
    return t.movedim(1, -1).movedim(1, -1)


def _channels_first(t: torch.Tensor) -> torch.Tensor:
    """``(B, *n, H, D) -> (B, H, D, *n)``."""
    return t.movedim(-1, 1).movedim(-1, 1)


def _check_fold(n: Sequence[int], m: Sequence[int], key_grid: Sequence[int] | None, bias=None) -> None:
    """``key_grid``: the level's own grid, finer than the input on the axes where ``k, v`` were folded onto it; a
    folded level takes no score ``bias`` (its folded cells have no single displacement per key)."""
    if key_grid is None:
        return
    if len(key_grid) != len(m) or any(not isinstance(f, int) or isinstance(f, bool) for f in key_grid):
        raise ValueError(f"key_grid: expected {len(m)} ints (the level's key cells per axis), got {key_grid!r}")
    for na, ma, fa in zip(n, m, key_grid):
        if fa != ma and not (ma == na < fa):
            raise ValueError(f"key_grid: expected, per axis, the keys' size or a size above the input's with the keys "
                             f"on the input grid, got key_grid={tuple(key_grid)} for keys {tuple(m)}, input {tuple(n)}")
    if bias is not None and tuple(key_grid) != tuple(m):
        raise ValueError("key_grid: a folded level takes no score bias (pass the level's own keys)")


def box_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor,
                  window: Sequence[int], scale: float, bias: Callable | None = None, taper: bool = True,
                  backend: str | None = None, key_grid: Sequence[int] | None = None) -> torch.Tensor:
    """One level of the physical pyramid (module docstring): ``q (B, H, D, *n)`` against ``k, v (B, H, D, *m)``,
    ``logw (B, *m)``, windows of ``window`` key cells per axis (tapered when ``taper`` and the level is wider
    than its window). Returns ``(B, H, D, *n)``.

    ``bias``: the score bias of :func:`~sciattn.multipole.physical.level_attention`; a
    :class:`~sciattn.multipole.relative_bias.RelativePositionBias` runs through the CPU kernels too, any other
    callable through SDPA only. A bias takes no ``key_grid`` (the folded tables have no displacement per key).
    ``backend``: ``None`` (the fused CPU kernels where they apply, see :func:`box_attention_backend`), ``"cpu"``
    or ``"sdpa"``; a forced backend that does not apply raises, naming why.
    ``key_grid``: the level's grid where it is finer than the input and ``k, v, logw`` are the input-grid cells it
    repeats (:func:`~sciattn.multipole.physical.pool_to_grid` onto ``min(key_grid, n)``): the level is computed
    folded onto the input grid (:func:`~sciattn.multipole.geometry.folded_axis_geometry`; CPU kernels only)."""
    chosen = _choose(q, bias, backend, k, v)
    _check_fold(q.shape[3:], k.shape[3:], key_grid, bias)
    if key_grid is not None and tuple(key_grid) != tuple(k.shape[3:]) and chosen != "cpu":
        raise ValueError(f"key_grid: a folded level runs through the CPU kernels only, this call takes {chosen!r}")
    if chosen == "flex":
        return box_flex(q, k, v, logw, window, scale, taper)
    if chosen == "sdpa":
        out = level_attention(_channels_last(q), _channels_last(k), _channels_last(v), logw, window, scale, bias,
                              taper=taper)
        return _channels_first(out)
    return _box_cpu(q, k, v, logw, window, scale, taper, key_grid, bias)


def local_box_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor,
                        window: Sequence[int], scale: float, backend: str | None = None) -> torch.Tensor:
    """The local near field: every input cell over the clamped window of ``window`` input cells per axis around
    it (at most ``n_a``), ``q, k, v (B, H, D, *n)``, ``logw (B, *n)`` (:func:`~sciattn.multipole.physical.
    local_attention`; for the CPU kernels a box attention with ``m = n`` and hard windows)."""
    chosen = _choose(q, None, backend, k, v)
    n = q.shape[3:]
    if chosen == "flex":
        return box_flex(q, k, v, logw, [min(w, a) for w, a in zip(window, n)], scale, False)
    if chosen == "sdpa":
        out = local_attention(_channels_last(q), _channels_last(k), _channels_last(v), logw, window, scale)
        return _channels_first(out)
    return _box_cpu(q, k, v, logw, [min(w, a) for w, a in zip(window, n)], scale, False)


def _kernel_bias(bias, q):
    """``(radius, table)`` of the kernels for a :class:`RelativePositionBias` (``(0, None)`` without one)."""
    if bias is None:
        return 0, None
    if bias.table.shape[0] != q.shape[1] or bias.spatial_dims != q.dim() - 3:
        raise ValueError(f"bias: expected a table of {q.shape[1]} heads over {q.dim() - 3} axes, got "
                         f"{tuple(bias.table.shape)}")
    return bias.radius, bias.kernel_table(q.dtype)


def _box_cpu(q, k, v, logw, window, scale, taper, key_grid=None, bias=None):
    b, h, dh = q.shape[:3]
    n, m = tuple(q.shape[3:]), tuple(k.shape[3:])
    if v.shape[2] != dh or k.shape[2] != dh:
        raise ValueError(f"v: expected the head dimension of q ({dh}) for the CPU kernels, got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    radius, table = _kernel_bias(bias, q)
    n3, m3, starts, logphi, (a, r), upos = _geometry(n, m, window, taper, q.dtype, q.device, key_grid, radius)
    out, _ = _box_forward(q.reshape(b, h, dh, -1).contiguous(), k.reshape(b, h, dh, -1).contiguous(),
                          v.reshape(b, h, dh, -1).contiguous(), logw.to(q.dtype).reshape(b, -1).contiguous(),
                          n3, m3, starts, logphi, float(scale), a, r, table, upos)
    return out.view(b, h, dh, *n)


def accumulate_box_attention(acc: torch.Tensor, gamma: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                             v: torch.Tensor, logw: torch.Tensor, window: Sequence[int], scale: float,
                             taper: bool = True, key_grid: Sequence[int] | None = None,
                             bias: RelativePositionBias | None = None) -> bool:
    """``acc += γ_h A`` in place (``acc (B, H, D, *n)``, ``γ (H,)``, ``A`` the level's :func:`box_attention`)
    through the fused CPU kernels, without allocating ``A``: the inference path of the layer (nothing needs
    gradients). Returns False, doing nothing, where the kernels do not apply or a gradient is needed (the caller
    then adds :func:`box_attention`'s output itself). ``key_grid``, ``bias``: as in :func:`box_attention`."""
    tensors = (acc, gamma, q, k, v, logw) + (() if bias is None else (bias.table,))
    if box_attention_backend(q, bias)[0] != "cpu" or (torch.is_grad_enabled() and any(
            t.requires_grad for t in tensors)) or not acc.is_contiguous():
        return False
    b, h, dh = q.shape[:3]
    n, m = tuple(q.shape[3:]), tuple(k.shape[3:])
    _check_fold(n, m, key_grid, bias)
    radius, table = _kernel_bias(bias, q)
    n3, m3, starts, logphi, (a, r), upos = _geometry(n, m, window, taper, q.dtype, q.device, key_grid, radius)
    args = (q.reshape(b, h, dh, -1).contiguous(), k.reshape(b, h, dh, -1).contiguous(),
            v.reshape(b, h, dh, -1).contiguous(), logw.to(q.dtype).reshape(b, -1).contiguous(), n3, m3, starts,
            logphi, float(scale))
    out, lse = acc.view(b, h, dh, -1), q.new_empty(b, h, args[0].shape[3])
    g = gamma.to(q.dtype).contiguous()
    if a:
        _library().lanes_forward(*args, a, r, table, upos, out, lse, g)
    else:
        _library().boxes_forward(*args, table, upos, out, lse, g)
    return True
