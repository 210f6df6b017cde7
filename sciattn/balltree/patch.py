r"""Patch attention with pooled global tokens (MSPT's parallelised multi-scale attention), with quadrature weights.

Points are laid out in ``K`` patches of ``m`` slots (a ball-tree or cell layout, :func:`count_patches` /
:func:`physical_patches`); patch ``k`` holds the slots ``[k m, (k+1) m)``. Each patch also carries one global
token ``g_k`` (a "supernode", its pooled features). Patch ``k``'s sequence is its points followed by all ``K``
global tokens, and one softmax runs over it. For a query ``z`` of that sequence (a point of the patch, or a copy
of a global token), per head:

.. math::
    out_k(z) = \frac{\sum_{j \in P_k} w_j\, e^{s(z, x_j)} v_j + \sum_{c=1}^{K} W_c\, e^{s(z, g_c)} v(g_c)}
                    {\sum_{j \in P_k} w_j\, e^{s(z, x_j)} + \sum_{c=1}^{K} W_c\, e^{s(z, g_c)}} ,
    \qquad s(z, y) = \mathrm{scale}\; q(z) \cdot k(y),

the quadrature of a kernel integral over the patch ``P_k`` (point keys, weights ``w_j``) plus one over the whole
domain at the resolution of the patches (global keys, weights ``W_c``). A global token's output is the average
of its ``K`` copies, ``ĝ_c = Σ_k ω_k out_k(g_c)`` with ``Σ_k ω_k = 1``.

Two weightings (the caller passes the log-weights and ``ω``):

* MSPT as published (point-count patches): ``w_j = 1``, ``W_c = 1`` (a count of tokens), ``ω_k = 1/K``;
* resolution-aware (physical patches): ``w_j`` the quadrature weights, ``W_c = Σ_{j∈P_c} w_j`` the patch mass
  and ``ω_k = W_k / Σ W``, so each sum is a quadrature of an integral that does not change under refinement.

Padding slots (``w = 0``: log-weight ``-inf``) and empty patches (``W = 0``) are never keys. Cost per head:
``O(K (m + K)^2)``: ``O(N (m + K))`` for ``N = K m`` points, through
:func:`sciattn._blocked_sdpa.blocked_sdpa` (each patch's sequence is one block).

Shapes: point tokens ``(B, H, K·m, D)``, global tokens ``(B, H, K, D)``, ``point_logw`` ``(B, K·m)``,
``global_logw`` and ``copy_weights`` ``(B, K)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._blocked_sdpa import blocked_sdpa
from .._checks import check_positive_int, check_rank
from .build import build_ball_tree
from .physical import cell_layout
from .tree import BallTree

__all__ = ["count_patches", "patch_attention", "physical_patches", "pool_patches"]


def _assemble(pos: torch.Tensor, mask: torch.Tensor | None, index: torch.Tensor, slot: torch.Tensor,
              n_slots: int, cap: int) -> BallTree:
    """The layout whose slot ``slot[b, i]`` holds point ``index[b, i]`` (entries with ``slot < 0`` ignored); free
    slots take the remaining input indices (masked points, then ``N .. n_slots - 1``) in increasing order."""
    b, n, d = pos.shape
    dev = pos.device
    perm = torch.full((b, n_slots), -1, dtype=torch.long, device=dev)
    real = slot >= 0
    rows = torch.arange(b, device=dev)[:, None].expand_as(slot)
    perm[rows[real], slot[real]] = index[real]
    valid = torch.ones(b, n, dtype=torch.bool, device=dev) if mask is None else mask
    ext_real = F.pad(valid, (0, n_slots - n), value=False)
    rest = torch.sort(ext_real.to(torch.int8), dim=1, stable=True).indices
    free = perm < 0
    perm = torch.where(free, rest.gather(1, (free.long().cumsum(1) - 1).clamp_min(0)), perm)
    inverse = torch.empty_like(perm).scatter_(1, perm, torch.arange(n_slots, device=dev).expand(b, n_slots))
    tmask = ext_real.gather(1, perm)
    base = pos.masked_fill(~valid[..., None], 0.0)
    tpos = F.pad(base, (0, 0, 0, n_slots - n)).gather(1, perm[..., None].expand(b, n_slots, d))
    tpos = torch.where(tmask[..., None], tpos, torch.zeros((), dtype=pos.dtype, device=dev))
    return BallTree(perm, inverse, tmask, tpos, cap, n)


def count_patches(pos: torch.Tensor, mask: torch.Tensor | None, n_patches: int) -> BallTree:
    """MSPT's published patches: every cloud's real points in ball-tree order, cut into ``n_patches`` contiguous
    runs of ``L_b = ⌈n_b / K⌉`` points (the last runs shorter, or empty when ``n_b < K(L_b - 1) + 1``).

    Each patch is padded to the capacity ``m = max(max_b L_b, ⌈N / K⌉)`` slots, so patch ``k`` of every cloud
    is the slots ``[k m, (k+1) m)`` (a :class:`BallTree` with ``ball_size = m``). A cloud's patches depend on its
    own points only, so the layout is independent of the batch and of padding. The point count per patch is
    ``n_b / K``: it grows with the resolution (the published method's resolution dependence)."""
    check_positive_int("n_patches", n_patches)
    n = pos.shape[1]
    tree = build_ball_tree(pos, mask, 1)
    real = tree.mask  # (B, P0) real slots in tree order
    per = (real.sum(1) + n_patches - 1) // n_patches  # L_b
    cap = max(int(per.max()), -(-n // n_patches), 1)  # host sync: the capacity is a shape
    rank = real.long().cumsum(1) - 1
    slot = torch.where(real, (rank // per[:, None]) * cap + rank % per[:, None], -1)
    return _assemble(pos, mask, tree.perm, slot, n_patches * cap, cap)


def physical_patches(pos: torch.Tensor, mask: torch.Tensor | None, diameter: float,
                     max_patches: int | None = None) -> BallTree:
    """Patches of a fixed physical size: the non-empty cells at most ``diameter`` across of a spatial bisection
    of the cloud's snapped box (:func:`~sciattn.balltree.physical.cell_layout`), in the layout's k-d order,
    each padded to the batch's capacity, the most points of a cell (a :class:`BallTree` with ``ball_size`` the
    capacity). The cells do not
    move under refinement; the points per patch grow with the resolution. Empty cells are dropped (every
    patch is a global token, whose count enters the cost squared); a cloud with fewer non-empty cells than
    another has empty patches at the end.

    Memory guard: while a cloud has more than ``max_patches`` non-empty cells (a cloud much larger than the
    diameter, or sparse: the cost has a term ``K³``), the diameter is multiplied by ``√2`` (about one bisection
    coarser); the layer is then coarser than asked, and says nothing about it (as the guards of
    :func:`~sciattn.balltree.physical.cell_layout`)."""
    while True:
        lay = cell_layout(pos, mask, [diameter]).tree
        b, cap0 = lay.perm.shape[0], lay.ball_size
        counts = lay.mask.view(b, -1, cap0).sum(2)  # (B, cells)
        filled = counts > 0
        if max_patches is None or int(filled.sum(1).max()) <= max_patches:  # host sync
            break
        diameter *= math.sqrt(2.0)
    # a cell's points are the first slots of its run; the capacity is the fullest cell (not a power of two)
    cap = max(int(counts.max()), 1)  # host sync: the capacity is a shape
    new_cell = filled.long().cumsum(1) - 1
    n_cells = max(int(filled.sum(1).max()), -(-pos.shape[1] // cap))  # host sync: the patch count is a shape
    offset = torch.arange(lay.perm.shape[1], device=pos.device) % cap0
    cell = torch.arange(lay.perm.shape[1], device=pos.device) // cap0
    slot = torch.where(lay.mask, new_cell[:, cell] * cap + offset, -1)
    return _assemble(pos, mask, lay.perm, slot, n_cells * cap, cap)


def pool_patches(h: torch.Tensor, w: torch.Tensor, patch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ḡ, W)``: the weighted mean of every patch ``ḡ_k = Σ_{j∈P_k} w_j h_j / W_k`` ``(B, K, C)`` (zero for an
    empty patch) and its mass ``W_k = Σ_{j∈P_k} w_j`` ``(B, K)``; ``h`` ``(B, K·m, C)``, ``w`` ``(B, K·m)`` zero on
    padding."""
    b, p, c = h.shape
    hw = (h * w[..., None].to(h.dtype)).view(b, p // patch_size, patch_size, c).sum(2)
    mass = w.view(b, p // patch_size, patch_size).sum(2)
    safe = torch.where(mass > 0, mass, torch.ones((), dtype=mass.dtype, device=mass.device))
    return hw / safe[..., None].to(h.dtype), mass


def patch_attention(
    point_qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    global_qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    patch_size: int,
    point_logw: torch.Tensor,
    global_logw: torch.Tensor,
    copy_weights: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of every patch's points and global-token copies over the patch's points and all global
    tokens (module docstring); returns ``(points (B, H, K·m, E), globals)``: the ``copy_weights``-average of the
    ``K`` copies ``(B, H, K, E)``, or with ``copy_weights=None`` every copy ``(B, H, K_copy, K, E)`` (MSPT applies
    a nonlinear feed-forward to each copy before averaging)."""
    qp, kp, vp = point_qkv
    qg, kg, vg = global_qkv
    check_positive_int("patch_size", patch_size)
    check_rank("point q", qp, 4, "(B, H, K·m, D)")
    b, h, p, dd = qp.shape
    if p % patch_size:
        raise ValueError(f"point q: expected a slot count divisible by patch_size={patch_size}, got {p}")
    k = p // patch_size
    if tuple(qg.shape[:3]) != (b, h, k):
        raise ValueError(f"global q: expected shape {(b, h, k, dd)} (one global token per patch), got {tuple(qg.shape)}")
    m = patch_size

    def seq(tp: torch.Tensor, tg: torch.Tensor) -> torch.Tensor:  # (B, H, K, m + K, ·)
        return torch.cat([tp.view(b, h, k, m, tp.shape[-1]), tg[:, :, None].expand(b, h, k, k, tg.shape[-1])], 3)

    logw = torch.cat([point_logw.view(b, k, m), global_logw[:, None, :].expand(b, k, k)], dim=2)
    scale = 1.0 / math.sqrt(dd) if scale is None else scale
    out = blocked_sdpa(seq(qp, qg), seq(kp, kg), seq(vp, vg), logw, None, scale)  # (B, H, K, m + K, E)
    points = out[:, :, :, :m].reshape(b, h, p, out.shape[-1])
    copies = out[:, :, :, m:]
    if copy_weights is None:
        return points, copies
    return points, torch.einsum("bhkce,bk->bhce", copies, copy_weights.to(out.dtype))
