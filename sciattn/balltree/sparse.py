"""Ball sparse attention (BSA; Brita et al., arXiv 2506.12541): NSA's three branches on a ball tree.

Tokens are in ball-tree order, so a *block* of ``b`` consecutive tokens is a sub-ball (a tree
node) and a *group* of ``g`` consecutive queries too. With ``P`` tokens, balls of ``m``, per head:

* **local** — ball attention (:func:`~sciattn.balltree.ball_attention`) with distance bias ``σ_l``.
* **compressed** — every block is pooled into one token with learned slot weights,
  ``k̄_c = Σ_{j∈c} α_j k_j``, ``α = softmax_j(a_{slot(j)} + log w_j)`` (likewise ``v̄``, and ``q̄``
  for coarse queries), carrying the block measure ``w̄_c = Σ_{j∈c} w_j`` and centroid ``x̄_c``.
  Coarse queries (default): ``ō_G = Σ_c w̄_c e^{s̄_Gc} v̄_c / Σ_c w̄_c e^{s̄_Gc}``,
  ``s̄_Gc = q̄_G·k̄_c/√D - σ_c ‖x̄_G - x̄_c‖``, broadcast to the block's members.
* **selected** — each query group ``G`` ranks the blocks by the compressed attention
  probabilities (summed over heads, so heads share the selection), drops empty blocks and —
  by default — the blocks of its own ball (the local branch covers them), keeps the top ``k``,
  **gathers** their keys and values and attends to those ``k·b`` tokens only, with distance bias
  ``σ_s``. No ``P×P`` mask or score matrix is ever formed.

The branches are mixed per token and head by sigmoid gates, ``y = W_o Σ_r g_r(h) ⊙ o_r``.

Cost per head (``D`` head size; ``Mb = P/b`` blocks, ``Mg = P/g`` groups):

=================  ===============================  ==============================================
branch             time                             memory
=================  ===============================  ==============================================
local              ``O(P·m·D)``                     ``O(P·m)``
compressed         ``O(Mb²·D)`` coarse queries,     ``O(Mb²)``, or ``O(P·Mb)``
                   ``O(P·Mb·D)`` fine queries
selection scores   shared with the compressed       ``O(Mg·Mb)``
                   scores when ``g = b`` and coarse
                   queries, else ``O(Mg·Mb·D)``
selected           ``O(P·k·b·D)``                   ``O(P·k·b·D/g)`` gathered keys and values
=================  ===============================  ==============================================

No branch is ``O(P²)``: the only all-pairs term is between the ``P/b`` block tokens (NSA's
compression); it dominates for ``P ≳ m·b²``, where a larger ``block_size`` restores the balance. With a
``window`` ``W`` (the operator's default) ``P`` is ``W`` in the compressed and selected rows, per window, and the
windows run :data:`CHUNK_ELEMENTS` entries at a time, so no intermediate of theirs grows with the cloud.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._attention_inputs import prepare_key_logweights
from .._checks import check_positive_int
from .functional import ball_attention
from .module import BallAttention
from .physical import check_length
from .tree import ball_centers, check_power_of_two

__all__ = ["BallSparseAttention", "safe_softmax", "pool_blocks", "select_blocks", "selected_attention"]


#: Entries of the largest intermediate of one run of the windowed compressed and selected branches (2^21: 8 MiB in
#: float32). The windows are independent, so they run a bounded number at a time: every intermediate then has a size
#: that does not grow with the cloud. Run all at once, the ``(B·P/W, H, W/b, W/b)`` scores of the compressed branch
#: grew with ``P`` past the allocator's reuse limit (glibc serves blocks above 32 MiB by fresh ``mmap``, every page
#: faulted in again at each call): at 65,536 points a training step faulted in 7 GiB, the super-linear term. CPU only:
#: on an accelerator all windows run in one call.
CHUNK_ELEMENTS = 2**21


def window_chunk(win: int, blk: int, grp: int, top_k: int, heads: int, coarse: bool) -> int:
    """Windows per run of :meth:`BallSparseAttention._sparse` so that its largest intermediate, per window and head
    ``(W/b)²`` compressed scores (coarse queries; ``W·W/b`` fine), ``(W/g)·(W/b)`` selection scores and ``W·k·b``
    selected scores, stays within :data:`CHUNK_ELEMENTS` (at least one window)."""
    mb = win // blk
    largest = max((mb if coarse else win) * mb, (win // grp) * mb, win * min(top_k, mb) * blk)
    return max(1, CHUNK_ELEMENTS // (heads * largest))


def safe_softmax(s: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis that returns zeros (not NaN) for rows that are entirely ``-inf``."""
    top = s.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=s.dtype, device=s.device))
    e = torch.exp(s - top)
    den = e.sum(dim=-1, keepdim=True)
    return e / torch.where(den > 0, den, torch.ones((), dtype=s.dtype, device=s.device))


def pool_blocks(t: torch.Tensor, slot_logits: torch.Tensor, logw: torch.Tensor, block: int) -> torch.Tensor:
    """Pool ``(B, H, P, D)`` into ``(B, H, P/b, D)``: weights ``softmax_j(a_slot(j) + log w_j)`` per block.

    ``slot_logits``: ``(H, b)``, or None for the quadrature mean ``Σ_j w_j t_j / Σ_j w_j``; ``logw``:
    ``(B, P)`` with ``-inf`` for excluded tokens. Blocks with no admissible token pool to zero.
    """
    b_, h, p, d = t.shape
    a = logw.view(b_, 1, p // block, block)
    if slot_logits is not None:  # None: the quadrature mean Σ w_j t_j / Σ w_j (physical blocks)
        a = slot_logits[:, :block].to(t.dtype).view(1, h, 1, block) + a
    alpha = safe_softmax(a)
    return (alpha.unsqueeze(-1) * t.view(b_, h, p // block, block, d)).sum(-2)


def _pair_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``‖a_i - b_j‖`` for ``(..., I, d)`` and ``(..., J, d)`` -> ``(..., I, J)`` (detached geometry)."""
    return torch.cdist(a.detach(), b.detach(), compute_mode="donot_use_mm_for_euclid_dist")


def select_blocks(
    importance: torch.Tensor, allowed: torch.Tensor, top_k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` admissible blocks per group: importance ``(B, Mg, Mb)``, allowed ``(B|1, Mg, Mb)``
    -> indices ``(B, Mg, k)`` and a validity flag ``(B, Mg, k)`` (False where fewer than ``k`` blocks
    were admissible); ``k = min(top_k, Mb)``."""
    k = min(top_k, importance.shape[-1])
    score = torch.where(allowed, importance, torch.full((), -math.inf, dtype=importance.dtype, device=importance.device))
    val, idx = score.topk(k, dim=-1)
    return idx, torch.isfinite(val)


def selected_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos: torch.Tensor,
    logw: torch.Tensor,
    idx: torch.Tensor,
    ok: torch.Tensor,
    group: int,
    block: int,
    sigma: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """Every query group attends to the gathered tokens of its selected blocks.

    Shapes:
        q, k: ``(B, H, P, D)``; v: ``(B, H, P, E)``; pos: ``(B, P, d)``; logw: ``(B, P)``;
        idx / ok: ``(B, P/g, k)`` block indices and validity; sigma: ``(H,)`` or None.
        Returns ``(B, H, P, E)``.
    """
    bsz, h, p, dq = q.shape
    e, d = v.shape[-1], pos.shape[-1]
    mg, kk = idx.shape[1], idx.shape[2]
    flat = idx.reshape(bsz, 1, mg * kk, 1, 1)
    ks = k.view(bsz, h, p // block, block, dq).gather(2, flat.expand(bsz, h, mg * kk, block, dq))
    vs = v.view(bsz, h, p // block, block, e).gather(2, flat.expand(bsz, h, mg * kk, block, e))
    ks, vs = ks.view(bsz, h, mg, kk * block, dq), vs.view(bsz, h, mg, kk * block, e)
    fl = idx.reshape(bsz, mg * kk, 1)
    lw = logw.view(bsz, p // block, block).gather(1, fl.expand(bsz, mg * kk, block)).view(bsz, mg, kk, block)
    lw = torch.where(ok[..., None], lw, torch.full((), -math.inf, dtype=lw.dtype, device=lw.device))
    s = torch.matmul(q.view(bsz, h, mg, group, dq), ks.transpose(-1, -2)) * scale  # (B, H, Mg, g, k·b)
    s = s + lw.view(bsz, 1, mg, 1, kk * block)
    if sigma is not None:
        ps = pos.view(bsz, p // block, block, d).gather(1, fl[..., None].expand(bsz, mg * kk, block, d))
        dist = _pair_distances(pos.view(bsz, mg, group, d), ps.view(bsz, mg, kk * block, d))
        s = s - sigma.to(s.dtype).view(1, h, 1, 1, 1) * dist.unsqueeze(1).to(s.dtype)
    return torch.matmul(safe_softmax(s), vs).view(bsz, h, p, e)


class BallSparseAttention(BallAttention):
    """Gated local + compressed + selected ball attention (BSA).

    Args:
        dim, n_heads, spatial_dims, ball_size, rpe, sigma_init, backend: as :class:`BallAttention`
            (the local branch; the position encoding is shared by all branches).
        block_size: tokens per compressed / selectable block ``b`` (a power of two dividing the ball).
        group_size: queries sharing one selection ``g`` (power of two dividing the ball; default ``b``).
        top_k: selected blocks per group.
        coarse_queries: compressed branch with pooled queries (``O((P/b)²)``) instead of every
            query attending to all block tokens (``O(P²/b)``).
        exclude_own_ball: never select blocks of the query's own ball (the local branch has them).
        window: point-count mode: the compressed and selected branches of a query see only the ``window``
            consecutive tree slots (a tree node of that many slots) around it, so their cost per query is
            bounded, ``O(window/b)``, instead of growing with ``P``; None: the whole cloud (BSA as published;
            ``O(P/b)`` per query, quadratic overall). The same as None for ``P <= window``.
        ball_diameter, block_diameter: physical mode (lengths in the units of ``pos``; ``ball_size``,
            ``block_size`` and ``group_size`` then None): the ball, the block and the query group are
            the tree nodes at most this wide (the group is the block), chosen per call from the tree
            (:mod:`sciattn.balltree.physical`); blocks pool by their quadrature mean (no per-slot
            weights, since a block's point count varies). The published point-count sizes shrink
            under refinement, so the published layer depends on the resolution.
        distance_bias: distance biases ``σ_l, σ_c, σ_s`` in the local, compressed and selected branches.

    Shapes:
        x ``(B, N, C)``, pos ``(B, N, d)``, mask / weights ``(B, N)`` -> ``(B, N, C)``;
        :meth:`attend` and :meth:`branches` work in tree order ``(B, P, ·)``.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        spatial_dims: int = 3,
        ball_size: int | None = 64,
        *,
        block_size: int | None = 8,
        group_size: int | None = None,
        top_k: int = 4,
        coarse_queries: bool = True,
        exclude_own_ball: bool = True,
        window: int | None = None,
        ball_diameter: float | None = None,
        block_diameter: float | None = None,
        rpe: bool = True,
        distance_bias: bool = True,
        sigma_init: float = 1.0,
        backend: str | None = None,
    ) -> None:
        super().__init__(dim, n_heads, spatial_dims, ball_size, ball_diameter=ball_diameter, rpe=rpe,
                         distance_bias=distance_bias, sigma_init=sigma_init, backend=backend)
        if window is not None:
            check_power_of_two("window", window)
            if ball_size is None or window < ball_size:
                raise ValueError(f"window: expected None or a power of two >= ball_size={ball_size} (point-count "
                                 f"balls), got {window}")
        self.window = window
        if ball_diameter is not None:
            for name, val in (("block_size", block_size), ("group_size", group_size)):
                if val is not None:
                    raise ValueError(f"{name}: expected None in physical mode (ball_diameter={ball_diameter}), "
                                     f"got {val}")
            if block_diameter is None:
                raise ValueError("block_diameter: expected a length with ball_diameter (physical mode), got None")
            block_diameter = check_length("block_diameter", block_diameter)
            if block_diameter > self.ball_diameter:
                raise ValueError(f"block_diameter: expected a length <= ball_diameter={self.ball_diameter}, "
                                 f"got {block_diameter}")
        else:
            if block_diameter is not None:
                raise ValueError(f"block_diameter: expected None with point-count balls (ball_size={ball_size}), "
                                 f"got {block_diameter}")
            if block_size is None:
                raise ValueError("block_size: expected a power of two with ball_size (point-count mode), got None")
            group_size = block_size if group_size is None else group_size
            for name, val in (("block_size", block_size), ("group_size", group_size)):
                check_power_of_two(name, val)
                if val > ball_size:
                    raise ValueError(f"{name}: expected a power of two <= ball_size={ball_size}, got {val}")
        check_positive_int("top_k", top_k)
        self.block_size, self.group_size, self.top_k = block_size, group_size, top_k
        self.block_diameter = block_diameter
        self.coarse_queries, self.exclude_own_ball = bool(coarse_queries), bool(exclude_own_ball)
        # q, k, v slot weights (point-count blocks only: a physical block has no fixed slots)
        self.pool_logits = None if ball_diameter is not None else nn.Parameter(torch.zeros(3, n_heads, block_size))
        self.sigma_compressed = nn.Parameter(torch.full((n_heads,), float(sigma_init))) if distance_bias else None
        self.sigma_selected = nn.Parameter(torch.full((n_heads,), float(sigma_init))) if distance_bias else None
        self.gate = nn.Linear(dim, 3 * n_heads)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)  # every branch starts at weight 1/2

    def sizes(self, p: int, given: tuple[int, ...] | None = None) -> tuple[int, int, int]:
        """``(ball, block, group)`` used for ``P = p`` tokens (each clamped to the token count);
        ``given``: ``(ball, block)`` or ``(ball, block, group)`` chosen from the tree (physical mode)."""
        if given is not None:
            ball = min(int(given[0]), p)
            blk = min(int(given[1]) if len(given) > 1 else ball, ball)
            return ball, blk, min(int(given[2]) if len(given) > 2 else blk, ball)
        if self.ball_size is None:
            raise ValueError("sizes: expected the (ball, block) sizes of a physical-mode layer chosen from the "
                             "tree, got None; use forward() or pass sizes")
        ball = min(self.ball_size, p)
        return ball, min(self.block_size, ball), min(self.group_size, ball)

    def physical_lengths(self) -> tuple[float, ...]:
        """``(ball_diameter, block_diameter)``: the ball, and the block that is also the query group."""
        return (self.ball_diameter, self.block_diameter)

    def branches(
        self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None,
        sizes: tuple[int, ...] | None = None, centres: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-head outputs ``(B, H, P, D)`` of the local, compressed and selected branches (tree order)."""
        bsz, p, _ = h.shape
        ball, blk, grp = self.sizes(p, sizes)
        if p % ball:
            raise ValueError(f"h: expected a token count that is a multiple of ball_size={ball}, got {p}")
        if mask is None:
            mask = torch.ones(bsz, p, dtype=torch.bool, device=h.device)
        pos = pos.to(h.dtype)
        scale = 1.0 / math.sqrt(self.head_dim)
        q, k, v = self.project(h, pos, mask, ball, centres)
        local = ball_attention(q, k, v, pos, ball, mask=mask, weights=weights, sigma=self.sigma,
                               scale=scale, backend=self.backend)
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        q, k, v = (torch.where(mask[:, None, :, None], t, zero) for t in (q, k, v))
        pos = torch.where(mask[..., None], pos, zero)
        logw = prepare_key_logweights(weights, mask, (bsz, p), h.dtype, h.device, check=True)
        logq = torch.where(mask, zero, torch.full((), -math.inf, dtype=h.dtype, device=h.device))
        win = self.window if self.ball_diameter is None else None
        if win is None or p <= win:
            compressed, selected = self._sparse(q, k, v, pos, mask, logw, logq, ball, blk, grp, scale)
            return local, compressed, selected
        # windows of `win` consecutive tree slots (tree nodes): the compressed and selected branches of each alone
        nw, hh = p // win, self.n_heads

        def split(t: torch.Tensor) -> torch.Tensor:  # (B, H, P, ·) -> (B·nw, H, win, ·); (B, P, ·) -> (B·nw, win, ·)
            if t.dim() == 4:
                return t.unflatten(2, (nw, win)).transpose(1, 2).flatten(0, 1)
            return t.unflatten(1, (nw, win)).flatten(0, 1)

        parts = [split(t) for t in (q, k, v, pos, mask, logw, logq)]
        # windows are independent: on CPU, run them a bounded number at a time (see CHUNK_ELEMENTS), a view of each
        # input; accelerators' caching allocators reuse blocks of any size, and one call launches fewer kernels
        per = window_chunk(win, blk, grp, self.top_k, hh, self.coarse_queries) if h.device.type == "cpu" else bsz * nw
        outs = [self._sparse(*(t[i:i + per] for t in parts), ball, blk, grp, scale) for i in range(0, bsz * nw, per)]
        compressed, selected = (outs[0][r] if len(outs) == 1 else torch.cat([o[r] for o in outs]) for r in (0, 1))
        merge = lambda t: t.unflatten(0, (bsz, nw)).transpose(1, 2).reshape(bsz, hh, p, t.shape[-1])  # noqa: E731
        return local, merge(compressed), merge(selected)

    def _sparse(self, q, k, v, pos, mask, logw, logq, ball: int, blk: int, grp: int, scale: float):
        """The compressed and selected branches on tree-ordered ``q, k, v`` ``(B, H, P, ·)`` (padding zeroed)."""
        bsz, p = mask.shape

        # Compressed branch: block tokens, their measure and centroids.
        slots = (None, None, None) if self.pool_logits is None else tuple(self.pool_logits)
        kc = pool_blocks(k, slots[1], logw, blk)
        vc = pool_blocks(v, slots[2], logw, blk)
        lwc = torch.logsumexp(logw.view(bsz, p // blk, blk), dim=-1)  # log Σ w, -inf if empty
        cen, _ = ball_centers(pos, mask, blk)
        if self.coarse_queries:
            # physical blocks: a query block is the quadrature mean of its queries, as keys and values
            qc = pool_blocks(q, slots[0], logq if self.pool_logits is not None else logw, blk)
            s = torch.matmul(qc, kc.transpose(-1, -2)) * scale + lwc[:, None, None, :]
            if self.sigma_compressed is not None:
                s = s - self.sigma_compressed.view(1, -1, 1, 1).to(s.dtype) * _pair_distances(cen, cen).unsqueeze(1)
            probs = safe_softmax(s)
            compressed = torch.matmul(probs, vc).repeat_interleave(blk, dim=2)
        else:
            s = torch.matmul(q, kc.transpose(-1, -2)) * scale + lwc[:, None, None, :]
            if self.sigma_compressed is not None:
                s = s - self.sigma_compressed.view(1, -1, 1, 1).to(s.dtype) * _pair_distances(pos, cen).unsqueeze(1)
            probs = None
            compressed = torch.matmul(safe_softmax(s), vc)

        # Selection: importance per query group, top-k blocks, gathered attention.
        if probs is not None and grp == blk:
            importance = probs
        else:
            g_mask = mask.view(bsz, p // grp, grp)
            cnt = g_mask.sum(-1).clamp_min(1).to(q.dtype)
            qg = q.view(bsz, self.n_heads, p // grp, grp, -1).sum(-2) / cnt[:, None, :, None]
            s = torch.matmul(qg, kc.transpose(-1, -2)) * scale + lwc[:, None, None, :]
            if self.sigma_compressed is not None:
                gcen, _ = ball_centers(pos, mask, grp)
                s = s - self.sigma_compressed.view(1, -1, 1, 1).to(s.dtype) * _pair_distances(gcen, cen).unsqueeze(1)
            importance = safe_softmax(s)
        allowed = torch.isfinite(lwc)[:, None, :]  # (B, 1, Mb)
        if self.exclude_own_ball:
            g_ball = torch.arange(p // grp, device=q.device) * grp // ball
            b_ball = torch.arange(p // blk, device=q.device) * blk // ball
            allowed = allowed & (g_ball[:, None] != b_ball[None, :])[None]
        idx, ok = select_blocks(importance.sum(1), allowed, self.top_k)
        selected = selected_attention(q, k, v, pos, logw, idx, ok, grp, blk, self.sigma_selected, scale)
        return compressed, selected

    def attend(
        self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None = None, weights: torch.Tensor | None = None,
        sizes: tuple[int, ...] | None = None, centres: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Gated sum of the three branches and the output projection, in tree order ``(B, P, C)``."""
        outs = self.branches(h, pos, mask, weights, sizes, centres)
        g = torch.sigmoid(self.gate(h)).view(h.shape[0], h.shape[1], 3, self.n_heads)  # (B, P, 3, H)
        z = sum(g[:, :, r].transpose(1, 2).unsqueeze(-1) * o for r, o in enumerate(outs))
        return self.proj(z.transpose(1, 2).flatten(2))

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", block_size={self.block_size}, group_size={self.group_size}, "
                f"block_diameter={self.block_diameter}, top_k={self.top_k}, coarse_queries={self.coarse_queries}, "
                f"exclude_own_ball={self.exclude_own_ball}, window={self.window}")
