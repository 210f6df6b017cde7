r"""Slot ranges of a layout held by the ranks of a domain-parallel group, and the exchange of tokens between two
of them: the pieces with which the ball-tree operators (Erwin, BSA) run one mesh split over processes.

A ball-tree layout puts every level's tokens in *slots* ``(B, P)``; a ball (and whatever else one attention
couples: a near-field window, a BSA window) is a contiguous run of slots. A rank holds, per cloud, the run
``[lo, hi)`` of whole units (:func:`balanced_owner`: contiguous runs of units, balanced by their real slots) and
computes on ``size`` local slots starting at ``start`` (``lo`` rounded down to the layout's window, so local
windows are global windows; slots of the window outside ``[lo, hi)`` are padding here) — :class:`SlotRange`.

Two layouts of the same tokens (a level and its rotated layout) are held by the ranks in two ways;
:class:`Exchange` moves every real token from its owner in one to its owner in the other with one
``torch.distributed.nn.functional.all_to_all_single``, which is differentiable: the exchange is a permutation of
rows across the ranks, and the backward of ``all_to_all_single`` is the reverse exchange (the adjoint of a
permutation is its inverse), so a cotangent returns to the rank and slot whose token made it. Every rank knows
every rank's ranges (they are computed from the same global layout on every rank), so the send and receive
lists need no communication.

Shapes: global slot arrays ``(B, P, ·)``; a rank's ``(B, size, ·)``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["Exchange", "SlotRange", "balanced_owner", "gather_points", "slot_ranges"]


def gather_points(pos: torch.Tensor, mask: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Every rank's points of the same clouds, concatenated in rank order: ``(pos (B, ΣN_r, d), mask (B, ΣN_r),
    offsets)`` with ``offsets[r]`` the first index of rank ``r``'s points. Positions are detached: they choose
    the layout (integer cells and sort orders, piecewise constant in the positions), not values."""
    world = dist.get_world_size(group)
    b, n, d = pos.shape
    sizes = torch.tensor([b, n, d], dtype=torch.long, device=pos.device)  # on the device: NCCL needs it there
    everyone = [torch.zeros_like(sizes) for _ in range(world)]
    dist.all_gather(everyone, sizes, group=group)
    if any(int(s[0]) != b or int(s[2]) != d for s in everyone):
        raise ValueError(f"pos: expected the same clouds (B, ·, d) = ({b}, ·, {d}) on every rank of the "
                         f"domain-parallel group, got {[tuple(int(v) for v in s) for s in everyone]}")
    counts = [int(s[1]) for s in everyone]
    top = max(counts)
    packed = torch.cat([F.pad(pos.detach(), (0, 0, 0, top - n)), F.pad(mask.to(pos.dtype), (0, top - n))[..., None]],
                       dim=-1)
    parts = [torch.empty_like(packed) for _ in range(world)]
    dist.all_gather(parts, packed.contiguous(), group=group)
    whole = torch.cat([p[:, :c] for p, c in zip(parts, counts, strict=True)], dim=1)
    offsets = [0]
    for c in counts[:-1]:
        offsets.append(offsets[-1] + c)
    return whole[..., :d], whole[..., d] > 0, offsets


def balanced_owner(unit: torch.Tensor, real: torch.Tensor, parts: int, n_units: int) -> torch.Tensor:
    """The rank that holds each slot: units (``unit`` ``(B, P)``, ids ``0..n_units-1`` non-decreasing along the real
    slots) go to ``parts`` ranks in contiguous runs, unit ``k`` to ``⌊parts·(c_k + n_k/2) / n⌋`` (``c_k`` real slots
    before it, ``n_k`` in it, ``n`` in all), integer arithmetic, so every rank computes the same. ``-1`` where
    ``real`` is False. Returns ``(B, P)`` long."""
    b = unit.shape[0]
    idx = torch.where(real, unit, n_units)
    cnt = torch.zeros(b, n_units + 1, dtype=torch.long, device=unit.device).scatter_add_(1, idx, torch.ones_like(idx))
    cnt = cnt[:, :n_units]
    before = cnt.cumsum(1) - cnt
    total = cnt.sum(1, keepdim=True).clamp_min(1)
    owner = torch.div(parts * (2 * before + cnt), 2 * total, rounding_mode="floor").clamp(0, parts - 1)
    return torch.where(real, F.pad(owner, (0, 1), value=-1).gather(1, idx), -1)


@dataclass(frozen=True, eq=False)
class SlotRange:
    """Rank's slots of a layout: it owns global slots ``[lo, hi)`` ``(B,)`` and computes on ``size`` local slots,
    local slot ``s`` being global slot ``start + s`` (``start`` ``(B,)``, a multiple of the layout's window)."""

    start: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    size: int

    def index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(global slot (B, size), owned (B, size))`` of every local slot."""
        g = self.start[:, None] + torch.arange(self.size, device=self.start.device)
        return g, (g >= self.lo[:, None]) & (g < self.hi[:, None])

    def take(self, t: torch.Tensor, fill=0) -> torch.Tensor:
        """The local slots of a global slot array ``t`` ``(B, P, ·)``; ``fill`` where not owned."""
        g, own = self.index()
        idx = g.clamp(max=t.shape[1] - 1)
        got = t.gather(1, idx.view(*idx.shape, *([1] * (t.dim() - 2))).expand(-1, -1, *t.shape[2:]))
        own = own.view(*own.shape, *([1] * (t.dim() - 2)))
        return torch.where(own, got, torch.as_tensor(fill, dtype=t.dtype, device=t.device))


def slot_ranges(owner: torch.Tensor, parts: int, window: int) -> list[SlotRange]:
    """Every rank's :class:`SlotRange` from the owner of each slot (``-1``: no real token), local windows aligned
    with the global ones (``window`` slots); a rank with no slot of a cloud holds an empty run there. Raises where
    a rank's slots are not one contiguous run (units not contiguous in the layout)."""
    b, p = owner.shape
    slots = torch.arange(p, device=owner.device).expand(b, p)
    out = []
    for r in range(parts):
        mine = owner == r
        has = mine.any(1)
        lo = torch.where(has, torch.where(mine, slots, p).amin(1), 0)
        hi = torch.where(has, torch.where(mine, slots + 1, 0).amax(1), 0)
        inside = (slots >= lo[:, None]) & (slots < hi[:, None])
        if bool((inside & (owner >= 0) & ~mine).any()):
            raise RuntimeError("domain parallelism: a rank's units are not one contiguous run of slots (a bug of the "
                               "layout's nesting)")
        start = torch.div(lo, window, rounding_mode="floor") * window
        size = max(int((hi - start).max()), 1)
        out.append(SlotRange(start, lo, hi, -(-size // window) * window))
    return out


def _all_to_all(x: torch.Tensor, out_rows: list[int], in_rows: list[int], group) -> torch.Tensor:
    """``torch.distributed.nn.functional.all_to_all_single`` (autograd: the backward is the reverse exchange); its
    deprecation notice is silenced, as for :func:`sciattn.partial_sums._all_reduce`."""
    from torch.distributed.nn.functional import all_to_all_single

    out = x.new_empty(sum(out_rows), *x.shape[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return all_to_all_single(out, x.contiguous(), out_rows, in_rows, group=group)


class Exchange:
    """Tokens of one layout held as ``src`` ranges to another held as ``dst`` ranges (module docstring).

    ``src_of`` ``(B, P_dst)``: the ``src`` slot of the token in each ``dst`` slot; ``real`` ``(B, P_dst)``: which
    ``dst`` slots hold a token; ``src`` / ``dst``: every rank's :class:`SlotRange` of the two layouts. Only real
    tokens move; a local slot that receives none is zero."""

    def __init__(self, src_of: torch.Tensor, real: torch.Tensor, src: list[SlotRange], dst: list[SlotRange],
                 rank: int, group) -> None:
        b, pd = src_of.shape
        dev = src_of.device
        slots = torch.arange(pd, device=dev).expand(b, pd)
        rows = torch.arange(b, device=dev)[:, None].expand(b, pd)
        to = _owner_of(slots, dst)
        frm = _owner_of(src_of, src)
        keep = real & (to >= 0)
        if bool((keep & (frm < 0)).any()):
            raise RuntimeError("domain parallelism: a token of the rotated layout has no owner (a bug of the layout)")
        rows, slots, to, frm, sof = rows[keep], slots[keep], to[keep], frm[keep], src_of[keep]  # (b, g) order
        parts = len(src)
        me_s, me_d = src[rank], dst[rank]
        send = frm == rank
        order = torch.sort(to[send], stable=True).indices
        self.send_idx = (rows[send] * me_s.size + sof[send] - me_s.start[rows[send]])[order]
        self.send_rows = torch.bincount(to[send], minlength=parts).tolist()
        recv = to == rank
        order = torch.sort(frm[recv], stable=True).indices
        self.recv_idx = (rows[recv] * me_d.size + slots[recv] - me_d.start[rows[recv]])[order]
        self.recv_rows = torch.bincount(frm[recv], minlength=parts).tolist()
        self.src_size, self.dst_size, self.group = me_s.size, me_d.size, group

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``(B, src size, C)`` -> ``(B, dst size, C)``."""
        b, _, c = h.shape
        moved = _all_to_all(h.reshape(-1, c).index_select(0, self.send_idx), self.recv_rows, self.send_rows,
                            self.group)
        return h.new_zeros(b * self.dst_size, c).index_copy(0, self.recv_idx, moved).view(b, self.dst_size, c)

    def back(self, h: torch.Tensor) -> torch.Tensor:
        """``(B, dst size, C)`` -> ``(B, src size, C)`` (the inverse of :meth:`forward` on real tokens)."""
        b, _, c = h.shape
        moved = _all_to_all(h.reshape(-1, c).index_select(0, self.recv_idx), self.send_rows, self.recv_rows,
                            self.group)
        return h.new_zeros(b * self.src_size, c).index_copy(0, self.send_idx, moved).view(b, self.src_size, c)


def _owner_of(slot: torch.Tensor, ranges: list[SlotRange]) -> torch.Tensor:
    """The rank whose range holds each global ``slot`` ``(B, P)``; ``-1`` for none."""
    out = torch.full_like(slot, -1)
    for r, rg in enumerate(ranges):
        out = torch.where((slot >= rg.lo[:, None]) & (slot < rg.hi[:, None]), r, out)
    return out
