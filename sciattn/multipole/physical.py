r"""The physical multipole pyramid: key grids of fixed physical size, queries at full resolution.

Functional pieces of :class:`~sciattn.multipole.MultipoleAttention`'s default mode
(``pyramid="physical"``). The domain is the unit box ``[0, 1]^d`` split into ``n`` cells per axis
(cell ``i`` has centre ``(i + 1/2) / n``). Key level ``ℓ`` is the grid of ``m_ℓ`` cells per axis, a
grid that does not depend on ``n``.

* :func:`physical_levels`: the key grids ``m_ℓ`` and windows ``c_ℓ`` (cells per axis).
* :func:`pool_to_grid`: quadrature-weighted cell means of input features on a key grid,
  ``x̄_c = Σ_{j: x_j ∈ c} ω_j x_j / ω_c``, ``ω_c = Σ_{j: x_j ∈ c} ω_j`` (input cells assigned to the
  key cell containing their centre). When ``n < m`` along an axis the key cell instead takes the
  input cell containing its centre and an equal share of its weight (``ω_j / #``), so the measure
  is kept.
* :func:`level_attention`: every query attends to the ``Π c_a`` key cells of a sliding window of
  its key cell ``j`` clamped to the domain (start ``clamp(j - c//2, 0, m - c)`` per axis),

  .. math::
      A_ℓ(x_i) = \frac{\sum_{c ∈ W_ℓ(i)} ω_c\, e^{s(q_i, \bar k_c) + b_{ic}}\, \bar v_c}
                      {\sum_{c ∈ W_ℓ(i)} ω_c\, e^{s(q_i, \bar k_c) + b_{ic}}},

  computed by fused SDPA over groups of the queries of one key cell (they share the key set), in
  chunks, so memory stays ``O(N + m^d c^d)`` per chunk.
* :func:`local_attention`: the near field below the key grids' scale, each query against a clamped
  sliding window of ``l`` input cells per axis (online over the ``Π l_a`` offsets: ``O(N)`` memory).

Shapes: ``q (B, H, *n, D)``; level keys/values ``(B, H, *m, D)``/``(B, H, *m, E)``; log-weights
``(B, *m)`` (``-inf`` excludes a key); outputs ``(B, H, *n, E)``, zero where no key is admissible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

__all__ = ["physical_levels", "pool_to_grid", "level_attention", "local_attention", "window_starts"]

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


def _query_groups(n, m: int, device):
    """Per axis: input cells of each key cell, ``(m, g)`` indices and validity (``g = max count``), or
    ``None`` when ``n`` is a multiple of ``m`` (the groups are a reshape)."""
    if _divides(n, m):
        return None
    owner = _axis_owner(n, m, device)
    counts = torch.bincount(owner, minlength=m)
    g = int(counts.max())
    first = torch.cumsum(counts, 0) - counts  # owner is non-decreasing: cells of j are first[j] .. first[j]+counts[j]-1
    idx = first[:, None] + torch.arange(g, device=device)
    valid = torch.arange(g, device=device) < counts[:, None]
    return torch.where(valid, idx, 0), valid


def level_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logw: torch.Tensor,
    window: Sequence[int],
    scale: float,
    bias: Callable[[list[torch.Tensor]], torch.Tensor] | None = None,
    scores_per_call: int | None = None,
) -> torch.Tensor:
    """One level of the physical pyramid (module docstring): ``q (B, H, *n, D)`` against key cells
    ``k (B, H, *m, D)``, ``v (B, H, *m, E)``, ``logw (B, *m)``, sliding windows of ``window`` cells.

    ``bias``: optional score bias, a function of the per-axis displacements ``δ_a`` (query position minus
    key cell centre, in units of the window; tensors broadcasting to ``(Mc, G_1..G_d, P_1..P_d)``) returning
    ``(H, Mc, G, P)``. Returns ``(B, H, *n, E)``."""
    b, h = q.shape[:2]
    n, m, d = tuple(q.shape[2:-1]), tuple(k.shape[2:-1]), q.dim() - 3
    dev, e = q.device, v.shape[-1]
    cells, p = math.prod(m), math.prod(window)
    # key cells of each window, flat (M, P)
    wins = [window_starts(ma, ca, dev)[:, None] + torch.arange(ca, device=dev) for ma, ca in zip(m, window)]
    strides = [math.prod(m[a + 1:]) for a in range(d)]
    kidx = torch.zeros((), dtype=torch.long, device=dev)
    for a in range(d):
        shape = [1] * (2 * d)
        shape[a], shape[d + a] = m[a], window[a]
        kidx = kidx + (wins[a] * strides[a]).view(shape)
    kidx = kidx.reshape(cells, p)
    kf, vf, lf = k.flatten(2, -2), v.flatten(2, -2), logw.flatten(1)
    groups = [_query_groups(na, ma, dev) for na, ma in zip(n, m)]
    reshaped = all(gr is None for gr in groups)
    if reshaped:  # every axis a multiple: queries of one key cell are a block of r_a = n_a / m_a cells per axis
        r = [na // ma for na, ma in zip(n, m)]
        split = [s for ma, ra in zip(m, r) for s in (ma, ra)]
        order = [0, 1] + [2 + 2 * a for a in range(d)] + [3 + 2 * a for a in range(d)] + [2 + 2 * d]
        qg = q.reshape(b, h, *split, q.shape[-1]).permute(order).reshape(b, h, cells, -1, q.shape[-1])
        gsize = r
        gidx = [torch.arange(ma, device=dev)[:, None] * ra + torch.arange(ra, device=dev) for ma, ra in zip(m, r)]
    else:
        groups = [gr if gr is not None else
                  (torch.arange(ma, device=dev)[:, None] * (na // ma) + torch.arange(na // ma, device=dev),
                   torch.ones(ma, na // ma, dtype=torch.bool, device=dev)) for gr, na, ma in zip(groups, n, m)]
        gsize = [gr[0].shape[1] for gr in groups]
        gidx = [gr[0] for gr in groups]
        qstr = [math.prod(n[a + 1:]) for a in range(d)]
        qidx = torch.zeros((), dtype=torch.long, device=dev)
        qval = torch.ones((), dtype=torch.bool, device=dev)
        for a in range(d):
            shape = [1] * (2 * d)
            shape[a], shape[d + a] = m[a], gsize[a]
            qidx = qidx + (gidx[a] * qstr[a]).view(shape)
            qval = qval & groups[a][1].view(shape)
        qidx, qval = qidx.reshape(cells, -1), qval.reshape(cells, -1)
        qf = q.flatten(2, -2)
    g = math.prod(gsize)
    # per-axis displacement tables (m_a, g_a, c_a): query position minus key centre, in window units
    deltas = None
    if bias is not None:
        deltas = []
        for a in range(d):
            xq = (gidx[a].to(q.dtype) + 0.5) / n[a] * m[a]  # in key cells
            xk = wins[a].to(q.dtype) + 0.5
            deltas.append((xq[:, :, None] - xk[:, None, :]) / window[a])
        cell_axes = [torch.arange(cells, device=dev) // strides[a] % m[a] for a in range(d)]
    if scores_per_call is None:
        scores_per_call = CPU_SCORES_PER_CALL if dev.type == "cpu" else b * h * cells * g * p
    per = cells if torch.compiler.is_compiling() else max(1, scores_per_call // max(1, b * h * g * p))
    parts = []
    for start in range(0, cells, per):
        stop = min(cells, start + per)
        mc = stop - start
        ki = kidx[start:stop]
        kc = kf[:, :, ki].reshape(b, h * mc, p, -1)
        vc = vf[:, :, ki].reshape(b, h * mc, p, e)
        lc = lf[:, ki]  # (B, Mc, P)
        empty = torch.isinf(lc).all(-1)  # (B, Mc)
        lc = torch.where(empty[..., None], torch.zeros((), dtype=lc.dtype, device=dev), lc).to(q.dtype)
        if reshaped:
            qc = qg[:, :, start:stop]
        else:
            qc = qf[:, :, qidx[start:stop]]
        qc = qc.reshape(b, h * mc, g, -1)
        if deltas is None:
            mask = lc[:, None, :, None, :].expand(b, h, mc, 1, p).reshape(b, h * mc, 1, p)
        else:
            sel = []
            for a in range(d):
                dl = deltas[a][cell_axes[a][start:stop]]  # (Mc, g_a, c_a)
                shape = [mc] + [1] * (2 * d)
                shape[1 + a], shape[1 + d + a] = gsize[a], window[a]
                sel.append(dl.view(shape))
            extra = bias(sel).to(q.dtype)  # (H, Mc, G, P)
            mask = (lc[:, None, :, None, :] + extra.unsqueeze(0)).reshape(b, h * mc, g, p)
        out = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, scale=scale).view(b, h, mc, g, e)
        parts.append(torch.where(empty[:, None, :, None, None], torch.zeros((), dtype=out.dtype, device=dev), out))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)  # (B, H, M, G, E)
    if reshaped:
        split = [s for ma, ra in zip(m, gsize) for s in (ma, ra)]
        inv = [0, 1] + [i for a in range(d) for i in (2 + a, 2 + d + a)] + [2 + 2 * d]
        return out.reshape(b, h, *m, *gsize, e).permute(inv).reshape(b, h, *n, e)
    res = out.new_zeros(b, h, math.prod(n), e)
    res = res.index_copy(2, qidx[qval], out[:, :, qval])
    return res.reshape(b, h, *n, e)


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logw: torch.Tensor,
                    window: Sequence[int], scale: float) -> torch.Tensor:
    """Softmax attention of every input cell over the clamped sliding window of ``window`` input cells
    (at most ``n_a``) per axis around it: ``q, k (B, H, *n, D)``, ``v (B, H, *n, E)``, ``logw (B, *n)``.

    Computed as a streaming (online) softmax over the ``Π l_a`` window offsets, each a gather of
    ``k``/``v`` along the axes, so memory is ``O(N (D + E))`` whatever the window."""
    d = q.dim() - 3
    n = q.shape[2:-1]
    dev = q.device
    lw = [min(wa, na) if isinstance(na, int) else wa for wa, na in zip(window, n)]
    tables = [window_starts(na, la, dev) for na, la in zip(n, lw)]
    run_max = acc = den = None
    for offset in torch.cartesian_prod(*[torch.arange(la) for la in lw]).reshape(-1, d).tolist():
        kk, vv, ll = k, v, logw
        for a, o in enumerate(offset):
            idx = tables[a] + o
            kk, vv = kk.index_select(2 + a, idx), vv.index_select(2 + a, idx)
            ll = ll.index_select(1 + a, idx)
        s = (q * kk).sum(-1) * scale + ll.unsqueeze(1).to(q.dtype)  # (B, H, *n)
        if run_max is None:
            run_max = s
            fin = torch.isfinite(s)
            p_ = torch.where(fin, torch.ones((), dtype=s.dtype, device=dev), 0.0)
            den, acc = p_, p_.unsqueeze(-1) * vv
            continue
        new = torch.maximum(run_max, s)
        safe = torch.where(torch.isfinite(new), new, 0.0)
        old_f = torch.exp(run_max - safe)
        cur_f = torch.exp(s - safe)
        den = den * old_f + cur_f
        acc = acc * old_f.unsqueeze(-1) + cur_f.unsqueeze(-1) * vv
        run_max = new
    return torch.where(den.unsqueeze(-1) > 0, acc / torch.where(den > 0, den, 1.0).unsqueeze(-1), 0.0)
