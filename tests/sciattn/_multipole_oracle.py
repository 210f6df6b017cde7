"""Frozen copy of the multipole physical pyramid's previous algorithm: the test oracle of its fused kernels.

Verbatim from commit 157823a (``sciattn/multipole/physical.py`` and ``MultipoleAttention._forward_physical``):
queries grouped by tiles of key cells against a halo through SDPA, with materialised window masks, every table
rebuilt on every call. The fused CPU kernels (``sciattn/multipole/csrc``) and the layer's new forward must
reproduce it to 1e-10 relative in float64 (tests/sciattn/test_multipole_kernels.py). Do not edit: it is the
reference the speed-up is held to. (The layer's relative-position bias method it called has moved, unchanged, to
``sciattn.multipole.relative_bias.RelativePositionBias``; its sums are checked on their own against a dense
interpolation in tests/sciattn/test_multipole_physical.py.)
"""


from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from sciattn.multipole.relative_bias import RelativePositionBias

__all__ = ["previous_forward"]

# Score entries per SDPA call on the CPU (as sciattn._blocked_sdpa.CPU_SCORES_PER_CALL).
CPU_SCORES_PER_CALL = 1 << 20


def physical_levels(fraction: Sequence[float], cells: Sequence[int], pool_factor: int,
                    max_levels: int | None) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``[(m_ℓ, c_ℓ), ...]``: key grid and window (cells per axis) of every level, finest first.

    ``m_0 = round(c / f)``, ``m_ℓ = max(1, round(m_0 / s^ℓ))``, window ``c_ℓ = min(c, m_ℓ)``; levels are
    added until one window holds the whole level (``m_ℓ <= c`` on every axis) or ``max_levels``."""
    m = tuple(max(1, math.floor(c / f + 0.5)) for c, f in zip(cells, fraction))
    base, levels, cap = m, [], max_levels or math.inf
    while True:
        levels.append((m, tuple(min(c, n) for c, n in zip(cells, m))))
        if all(n <= c for n, c in zip(m, cells)) or len(levels) >= cap:
            return levels
        s = pool_factor ** len(levels)
        m = tuple(max(1, math.floor(b / s + 0.5)) for b in base)


def _divides(n, m) -> bool:
    """``n`` a multiple of ``m`` (``n`` symbolic under torch.export: taken as one, see export_unit)."""
    return not isinstance(n, int) or n % m == 0


def _axis_owner(n: int, m: int, device) -> torch.Tensor:
    """Key cell (of ``m``) containing the centre of each input cell (of ``n``): ``floor((i + 1/2) m / n)``."""
    i = torch.arange(n, device=device)
    return torch.div((2 * i + 1) * m, 2 * n, rounding_mode="floor")


def pool_to_grid(x: torch.Tensor, w: torch.Tensor, grid: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted cell means ``(B, C, *m)`` and cell weights ``(B, *m)`` of ``x (B, C, *n)`` with weights
    ``w (B, *n)`` on the key grid ``m`` (module docstring); a cell of zero weight has mean 0.

    ``n`` a multiple of ``m``: a reshape-sum (exact under symbolic sizes). Otherwise per axis an
    ``index_add`` (``n > m``) or ``index_select`` (``n < m``, the weight shared out equally)."""
    d = len(grid)
    num, den = x * w.unsqueeze(1), w.unsqueeze(1)
    if all(_divides(n, m) for n, m in zip(x.shape[2:], grid)):
        split = [s for n, m in zip(x.shape[2:], grid) for s in (m, n // m)]
        red = tuple(3 + 2 * a for a in range(d))
        num = num.reshape(*num.shape[:2], *split).sum(red)
        den = den.reshape(*den.shape[:2], *split).sum(red)
    else:
        for a, m in enumerate(grid):
            n, ax = x.shape[2 + a], 2 + a
            if n == m:
                continue
            if n > m:
                owner = _axis_owner(n, m, x.device)
                shape = list(num.shape)
                shape[ax] = m
                num = num.new_zeros(shape).index_add_(ax, owner, num)
                shape[1] = 1
                den = den.new_zeros(shape).index_add_(ax, owner, den)
            else:
                src = _axis_owner(m, n, x.device)  # input cell containing each key cell's centre
                share = torch.bincount(src, minlength=n).to(den.dtype)[src]
                view = [1] * den.dim()
                view[ax] = m
                num = num.index_select(ax, src) / share.view(view)
                den = den.index_select(ax, src) / share.view(view)
    mean = torch.where(den > 0, num / torch.where(den > 0, den, torch.ones((), dtype=den.dtype)), 0.0)
    return mean, den[:, 0]


def window_starts(m: int, c: int, device=None) -> torch.Tensor:
    """First cell of the clamped sliding window of ``c`` cells around each of ``m`` cells:
    ``clamp(j - c//2, 0, m - c)``."""
    return (torch.arange(m, device=device) - c // 2).clamp(0, m - c)


def _tile(n, m: int, c: int) -> int:
    """Key cells per axis grouped into one tile (a divisor of ``m``, at most ``max(c, 8)``, holding at most 8
    input cells): tiles share a halo of keys,
    so fewer keys are gathered when a key cell holds few queries (``n / m`` small). Symbolic ``n``: 1."""
    if not isinstance(n, int):
        return 1
    r = n / m
    best = 1
    for t in range(1, max(c, 8) + 1):
        if m % t == 0 and t * r <= 8:
            best = t
    return best


def _axis_tables(n, m: int, c: int, tile: int, device, dtype, taper: bool = False):
    """Per-axis tables of one level: query groups ``(t, g)`` (input cells of each tile of ``tile`` key cells;
    ``None`` when they are a reshape), their validity, the key halo ``(t, h)`` of each tile, the log window
    weights of the (query, halo key) pairs ``(t, g, h)`` (hard: 0 inside the query's clamped sliding window,
    ``-inf`` outside, ``None`` when every pair is inside; tapered: ``log φ``, see :func:`taper_weights`) and
    the displacements ``(t, g, h)`` from query to key centre in window units."""
    t = m // tile
    starts = window_starts(m, c, device)  # (m,)
    first = torch.arange(t, device=device) * tile
    if taper and m > c:  # the windows of the key cells before and after the tile's too (the blend's two windows)
        halo = min(m, tile + c + 1)
        hs = starts[(first - 1).clamp(min=0)].clamp(max=m - halo)
    else:
        halo = min(m, tile + c - 1)
        hs = starts[first].clamp(max=m - halo)  # (t,)
    keys = hs[:, None] + torch.arange(halo, device=device)  # (t, halo)
    if _divides(n, m):
        r = n // m
        g = tile * r
        qidx = torch.arange(t, device=device)[:, None] * g + torch.arange(g, device=device)
        valid, reshape = None, True
    else:
        owner = _axis_owner(n, m, device) // tile
        counts = torch.bincount(owner, minlength=t)
        g = int(counts.max())
        begin = torch.cumsum(counts, 0) - counts  # owner is non-decreasing
        qidx = begin[:, None] + torch.arange(g, device=device)
        valid = torch.arange(g, device=device) < counts[:, None]
        qidx = torch.where(valid, qidx, 0)
        reshape = False
    xq = (qidx.to(dtype) + 0.5) * m / n  # query positions in key cells, (t, g)
    logphi = None
    if taper and m > c:
        logphi = taper_weights(xq, keys, m, c).log()  # (t, g, halo), -inf outside
    elif tile > 1:
        cell = xq.floor().clamp(0, m - 1).long()  # the query's key cell
        st = starts[cell]  # (t, g)
        inside = (keys[:, None, :] >= st[..., None]) & (keys[:, None, :] < st[..., None] + c)
        logphi = torch.where(inside, 0.0, -math.inf).to(dtype)
    delta = (xq[..., None] - (keys[:, None, :].to(dtype) + 0.5)) / c
    return dict(t=t, g=g, halo=halo, qidx=qidx, valid=valid, reshape=reshape, keys=keys, logphi=logphi,
                delta=delta)


def taper_weights(xq: torch.Tensor, keys: torch.Tensor, m: int, c: int) -> torch.Tensor:
    r"""Tapered window weights ``φ (t, g, h)`` along one axis of the queries at ``xq (t, g)`` (positions in key
    cells, ``[0, m]``) on the key cells ``keys (t, h)``: with ``u = x - 1/2`` (position between key-cell centres),
    ``j = floor(u)``, ``θ = u - j``, the blend of the clamped windows of the key cells on either side,

    .. math:: φ(x, y) = (1 - θ)\,[y ∈ W(j)] + θ\,[y ∈ W(j + 1)],
              \quad W(j) = \{s(j), …, s(j) + c - 1\},\ s(j) = clamp(clamp(j, 0, m-1) - ⌊c/2⌋, 0, m - c),

    continuous in ``x``: ``c - 1`` keys of weight 1 and the two edge keys of weight ``1 - θ`` and ``θ``, which
    reach 0 as the window slides past them (``c + 1`` keys). Away from the domain boundary it is the trapezoid
    ``φ = clamp((c+1)/2 - |x - y - o|, 0, 1)`` (``o = 1/2`` for even ``c``, 0 for odd; ``x - y`` in key cells),
    translation invariant, with ``Σ_y φ = c``. Where the window is clamped by the boundary both windows are the
    same, so ``φ`` is the hard window there (the window stops sliding and the taper is frozen), still continuous.
    At queries on key-cell centres (``θ = 0``: e.g. the local term, ``m = n``) it is the hard window."""
    u = xq - 0.5
    j = u.floor()
    theta = (u - j)[..., None]
    starts = window_starts(m, c, xq.device)
    j = j.long()
    s0 = starts[j.clamp(0, m - 1)][..., None]
    s1 = starts[(j + 1).clamp(0, m - 1)][..., None]
    k = keys[:, None, :]
    in0 = ((k >= s0) & (k < s0 + c)).to(xq.dtype)
    in1 = ((k >= s1) & (k < s1 + c)).to(xq.dtype)
    return (1 - theta) * in0 + theta * in1


def level_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logw: torch.Tensor,
    window: Sequence[int],
    scale: float,
    bias: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
    scores_per_call: int | None = None,
    tiles: Sequence[int] | None = None,
    taper: bool = True,
) -> torch.Tensor:
    """One level of the physical pyramid (module docstring): ``q (B, *n, H, D)`` against key cells
    ``k (B, *m, H, D)``, ``v (B, *m, H, E)``, ``logw (B, *m)``, sliding windows of ``window`` cells.

    The queries are grouped by tiles of key cells (``tiles`` per axis, default :func:`_tile`; 1: one key cell,
    whose queries share exactly its window): a group attends to the halo of its tile's windows, masked to each
    query's own window, through one fused SDPA batch entry. ``bias``: optional score bias, a function of the
    per-axis displacements ``δ_a`` (query position minus key cell centre, in units of the window; tensors
    broadcasting to ``(Mc, G_1..G_d, P_1..P_d)``) returning ``(H, Mc, G, P)``. ``taper``: the tapered windows
    (module docstring, :func:`taper_weights`; ``log Π_a φ_a`` added to the scores, the halo two key cells longer
    per axis), else the hard windows. Returns ``(B, *n, H, E)``."""
    b, h = q.shape[0], q.shape[-2]
    n, m, d = tuple(q.shape[1:-2]), tuple(k.shape[1:-2]), q.dim() - 3
    dev, e, dq = q.device, v.shape[-1], q.shape[-1]
    if tiles is None:
        tiles = [_tile(na, ma, ca) for na, ma, ca in zip(n, m, window)]
    ax = [_axis_tables(na, ma, ca, ta, dev, q.dtype, taper) for na, ma, ca, ta in zip(n, m, window, tiles)]
    groups, g, p = math.prod(a["t"] for a in ax), math.prod(a["g"] for a in ax), math.prod(a["halo"] for a in ax)

    def combine(tables, strides):  # per-axis (t_a, x_a) index tables -> flat (T, X) over the d axes
        out = torch.zeros((), dtype=torch.long, device=dev)
        for a, (tab, st) in enumerate(zip(tables, strides)):
            shape = [1] * (2 * d)
            shape[a], shape[d + a] = tab.shape
            out = out + (tab * st).view(shape)
        return out.reshape(groups, -1)

    kidx = combine([a["keys"] for a in ax], [math.prod(m[i + 1:]) for i in range(d)])  # (T, P)
    reshaped = all(a["reshape"] for a in ax)
    if reshaped:  # each group is a block of g_a = tile_a · n_a / m_a input cells per axis
        split = [s for a in ax for s in (a["t"], a["g"])]
        order = [0] + [1 + 2 * i for i in range(d)] + [2 + 2 * i for i in range(d)] + [1 + 2 * d, 2 + 2 * d]
        qg = q.reshape(b, *split, h, dq).permute(order).reshape(b, groups, g, h, dq)
    else:
        qidx = combine([a["qidx"] for a in ax], [math.prod(n[i + 1:]) for i in range(d)])  # (T, G)
        qval = torch.ones((), dtype=torch.bool, device=dev)
        for i, a in enumerate(ax):
            if a["valid"] is not None:
                shape = [1] * (2 * d)
                shape[i], shape[d + i] = a["valid"].shape
                qval = qval & a["valid"].view(shape)
        qval = qval.expand(*[a["t"] for a in ax], *[a["g"] for a in ax]).reshape(groups, g)
        qf = q.flatten(1, d)
    kf, vf, lf = k.flatten(1, d), v.flatten(1, d), logw.flatten(1)
    masked = any(a["logphi"] is not None for a in ax)
    group_axes = [torch.arange(groups, device=dev) // math.prod(a2["t"] for a2 in ax[i + 1:]) % ax[i]["t"]
                  for i in range(d)]

    def per_pair(name, start, stop, fill):  # per-axis (t, g, h) tables of the chunk, broadcast shapes
        sel = []
        for i, a in enumerate(ax):
            tab = a[name]
            shape = [stop - start] + [1] * (2 * d)
            shape[1 + i], shape[1 + d + i] = a["g"], a["halo"]
            sel.append(fill if tab is None else tab[group_axes[i][start:stop]].view(shape))
        return sel

    if scores_per_call is None:
        scores_per_call = CPU_SCORES_PER_CALL if dev.type == "cpu" else b * h * groups * g * p
    per = groups if torch.compiler.is_compiling() else max(1, scores_per_call // max(1, b * h * g * p))
    # Keys of every group gathered at once and split into chunks: the backward of one gather is one index_add
    # and that of split one concatenation, where a gather per chunk would add a zero-filled full-size gradient
    # per chunk (quadratic in the cell count for the local term). The gathered keys hold groups·P cells, a fixed
    # number on the key levels and about 1.6 N for the local term; beyond 4 N (and 2^26 entries) chunks gather.
    whole = torch.compiler.is_compiling() or groups * p <= max(4 * math.prod(n), (1 << 26) // max(1, b * h * (dq + e)))
    starts = list(range(0, groups, per))
    if whole:
        kflat = kidx.reshape(-1)
        kall, vall, lall = (kf.index_select(1, kflat).view(b, groups, p, h, dq),
                            vf.index_select(1, kflat).view(b, groups, p, h, e),
                            lf.index_select(1, kflat).view(b, groups, 1, p))
        kall, vall, lall = ([t] if per >= groups else t.split(per, dim=1) for t in (kall, vall, lall))
    qall = qg if reshaped else qf.index_select(1, qidx.reshape(-1)).view(b, groups, g, h, dq)
    qall = [qall] if per >= groups else qall.split(per, dim=1)  # one chunk (always under tracing): no split
    parts = []
    for ci, start in enumerate(starts):
        stop = min(groups, start + per)
        mc = stop - start
        if whole:
            kc = kall[ci].reshape(b * mc, p, h, dq).transpose(1, 2)  # (B·Mc, H, P, D)
            vc = vall[ci].reshape(b * mc, p, h, e).transpose(1, 2)
            lc = lall[ci].to(q.dtype)  # (B, Mc, 1, P)
        else:
            kflat = kidx[start:stop].reshape(-1)
            kc = kf.index_select(1, kflat).view(b * mc, p, h, dq).transpose(1, 2)
            vc = vf.index_select(1, kflat).view(b * mc, p, h, e).transpose(1, 2)
            lc = lf.index_select(1, kflat).reshape(b, mc, 1, p).to(q.dtype)
        qc = qall[ci].reshape(b * mc, g, h, dq).transpose(1, 2)  # (B·Mc, H, G, D)
        if masked:
            lphi = None  # Σ_a log φ_a: the product of the per-axis window weights (hard: 0 / -inf)
            for t in per_pair("logphi", start, stop, None):
                if t is not None:
                    lphi = t if lphi is None else lphi + t
            lphi = lphi.expand(mc, *[a["g"] for a in ax], *[a["halo"] for a in ax]).reshape(mc, g, p)
            lc = lc + lphi.to(q.dtype)  # (B, Mc, G, P)
        empty = torch.isinf(lc).all(-1)  # (B, Mc, G|1): no admissible key
        lc = torch.where(empty[..., None], torch.zeros((), dtype=lc.dtype, device=dev), lc)
        if bias is None:
            mask = lc.reshape(b * mc, 1, lc.shape[-2], p)  # broadcast over the heads
        else:
            extra = bias(per_pair("delta", start, stop, None)).to(q.dtype)  # (H, Mc, G, P)
            mask = (lc.unsqueeze(2) + extra.transpose(0, 1).unsqueeze(0)).reshape(b * mc, h, g, p)
        out = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, scale=scale)  # (B·Mc, H, G, E)
        out = out.transpose(1, 2).reshape(b, mc, g, h, e)
        if torch.compiler.is_compiling() or bool(empty.any()):  # (a query without admissible keys is rare)
            out = torch.where(empty[..., None, None], torch.zeros((), dtype=out.dtype, device=dev), out)
        parts.append(out)
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (B, T, G, H, E)
    if reshaped:
        inv = [0] + [i for a in range(d) for i in (1 + a, 1 + d + a)] + [1 + 2 * d, 2 + 2 * d]
        return out.reshape(b, *[a["t"] for a in ax], *[a["g"] for a in ax], h, e).permute(inv).reshape(b, *n, h, e)
    res = out.new_zeros(b, math.prod(n), h, e)
    res = res.index_copy(1, qidx[qval], out[:, qval])
    return res.reshape(b, *n, h, e)


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor,
                    window: Sequence[int], scale: float) -> torch.Tensor:
    """Softmax attention of every input cell over the clamped sliding window of ``window`` input cells
    (at most ``n_a``) per axis around it: ``q, k (B, *n, H, D)``, ``v (B, *n, H, E)``, ``logw (B, *n)``.

    The same computation as :func:`level_attention` with the input grid as key grid (``m = n``): tiles of
    up to 8 cells per axis attend to their halo, masked to each query's window, in fused SDPA chunks."""
    n = q.shape[1:-2]
    lw = [min(wa, na) if isinstance(na, int) else wa for wa, na in zip(window, n)]
    if all(isinstance(na, int) for na in n):
        return level_attention(q, k, v, logw, lw, scale, taper=False)  # queries on key centres: φ is hard
    return _local_offsets(q, k, v, logw, lw, scale)


def _local_offsets(q, k, v, logw, lw, scale):
    """:func:`local_attention` for symbolic sizes (torch.export): the window offsets one by one, each a gather
    along the axes (no size depends on a comparison of symbolic sizes), one softmax over the offsets."""
    dev = q.device
    tables = [window_starts(na, la, dev) for na, la in zip(q.shape[1:-2], lw)]

    def gather(t, offset):
        for a, o in enumerate(offset):
            t = t.index_select(1 + a, tables[a] + o)
        return t

    offsets = [list(o) for o in itertools.product(*[range(la) for la in lw])]
    scores = torch.stack([torch.linalg.vecdot(q, gather(k, o)) * scale + gather(logw, o).unsqueeze(-1).to(q.dtype)
                          for o in offsets], dim=-1)  # (B, *n, H, L)
    empty = torch.isinf(scores).all(-1, keepdim=True)
    probs = torch.softmax(torch.where(empty, torch.zeros((), dtype=scores.dtype, device=dev), scores), dim=-1)
    probs = torch.where(empty, torch.zeros((), dtype=probs.dtype, device=dev), probs)
    out = None
    for i, o in enumerate(offsets):
        term = probs[..., i, None] * gather(v, o)
        out = term if out is None else out + term
    return out


def previous_forward(self, x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The layer ``self`` (physical pyramid) computed as MultipoleAttention._forward_physical did at commit 157823a."""
    b, grid = x.shape[0], tuple(x.shape[2:])
    h, dh = self.n_heads, self.head_dim
    w = (torch.ones((), dtype=x.dtype, device=x.device) if weights is None else weights.to(x.dtype))
    w = w.expand(b, *grid).contiguous()  # (B, *n) materialised: reshapes of an expanded tensor guard on B
    xl = x.movedim(1, -1)
    qw, kw, vw = self.qkv.weight.split(self.dim)
    qb, kb, vb = self.qkv.bias.split(self.dim)

    def heads(t):  # (B, *n, C) -> (B, *n, H, Dh), channels last
        return t.unflatten(-1, (h, dh))

    q = heads(F.linear(xl, qw, qb))
    if self.q_norm is not None:
        q = self.q_norm(q)
    scale = 1.0 / math.sqrt(dh)
    neg = torch.full((), -math.inf, dtype=x.dtype, device=x.device)
    out = torch.zeros((), dtype=x.dtype, device=x.device)
    if self.local_window is not None:
        k, v = heads(F.linear(xl, kw, kb)), heads(F.linear(xl, vw, vb))
        if self.k_norm is not None:
            k = self.k_norm(k)
        logw = torch.where(w > 0, torch.log(torch.where(w > 0, w, 1.0)), neg)
        out = local_attention(q, k, v, logw, self.local_window, scale)
    bias = RelativePositionBias(self.rel_bias_table, self.rel_pos_bias) if self.rel_bias_table is not None else None
    prev = None  # (grid, means, weights) of the level above, when it nests exactly on the input
    for i, (m, c) in enumerate(self.levels):
        if prev is not None and all(a % b == 0 for a, b in zip(prev[0], m)):
            xm, wm = pool_to_grid(prev[1], prev[2], m)  # a weighted mean of weighted means: the same means
        else:
            xm, wm = pool_to_grid(x, w, m)  # means then projection: exact (the weighted mean is affine)
        nested = all(not isinstance(n, int) or n % a == 0 for n, a in zip(grid, m))
        prev = (m, xm, wm) if nested else None
        xm = xm.movedim(1, -1)
        k, v = heads(F.linear(xm, kw, kb)), heads(F.linear(xm, vw, vb))
        if self.k_norm is not None:
            k = self.k_norm(k)
        logw = torch.where(wm > 0, torch.log(torch.where(wm > 0, wm, 1.0)), neg)
        a = level_attention(q, k, v, logw, c, scale, bias, taper=self.window_taper == "linear")
        out = torch.addcmul(out, a, self.level_weight[i].to(a.dtype).view(h, 1))
    r = out.flatten(-2)  # (B, *n, C) head-major
    if self.gate_proj is not None:
        r = F.silu(self.gate_proj(xl)) * r
    return self.out_proj(r).movedim(-1, 1)
