"""Frozen float64 oracle of the windowed compressed and selected BSA branches, as computed before the windows ran in
bounded chunks (sciattn commit d1d114b): every window of every cloud in one call, all its helpers copied here, so a
later change to :mod:`sciattn.balltree.sparse` is tested against the algorithm it replaced, not against itself."""

from __future__ import annotations

import math

import torch

from sciattn._attention_inputs import prepare_key_logweights
from sciattn.balltree.tree import ball_centers


def _safe_softmax(s):
    top = s.amax(dim=-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=s.dtype, device=s.device))
    e = torch.exp(s - top)
    den = e.sum(dim=-1, keepdim=True)
    return e / torch.where(den > 0, den, torch.ones((), dtype=s.dtype, device=s.device))


def _pool(t, slot_logits, logw, block):
    b_, h, p, d = t.shape
    a = logw.view(b_, 1, p // block, block)
    if slot_logits is not None:
        a = slot_logits[:, :block].to(t.dtype).view(1, h, 1, block) + a
    return (_safe_softmax(a).unsqueeze(-1) * t.view(b_, h, p // block, block, d)).sum(-2)


def _dist(a, b):
    return torch.cdist(a.detach(), b.detach(), compute_mode="donot_use_mm_for_euclid_dist")


def _selected(q, k, v, pos, logw, idx, ok, group, block, sigma, scale):
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
    s = torch.matmul(q.view(bsz, h, mg, group, dq), ks.transpose(-1, -2)) * scale
    s = s + lw.view(bsz, 1, mg, 1, kk * block)
    if sigma is not None:
        ps = pos.view(bsz, p // block, block, d).gather(1, fl[..., None].expand(bsz, mg * kk, block, d))
        s = s - sigma.to(s.dtype).view(1, h, 1, 1, 1) * _dist(pos.view(bsz, mg, group, d),
                                                              ps.view(bsz, mg, kk * block, d)).unsqueeze(1).to(s.dtype)
    return torch.matmul(_safe_softmax(s), vs).view(bsz, h, p, e)


def _sparse(layer, q, k, v, pos, mask, logw, logq, ball, blk, grp, scale):
    bsz, p = mask.shape
    slots = (None, None, None) if layer.pool_logits is None else tuple(layer.pool_logits)
    kc, vc = _pool(k, slots[1], logw, blk), _pool(v, slots[2], logw, blk)
    lwc = torch.logsumexp(logw.view(bsz, p // blk, blk), dim=-1)
    cen, _ = ball_centers(pos, mask, blk)
    sig = layer.sigma_compressed
    if layer.coarse_queries:
        qc = _pool(q, slots[0], logq if layer.pool_logits is not None else logw, blk)
        s = torch.matmul(qc, kc.transpose(-1, -2)) * scale + lwc[:, None, None, :]
        if sig is not None:
            s = s - sig.view(1, -1, 1, 1).to(s.dtype) * _dist(cen, cen).unsqueeze(1)
        probs = _safe_softmax(s)
        compressed = torch.matmul(probs, vc).repeat_interleave(blk, dim=2)
    else:
        s = torch.matmul(q, kc.transpose(-1, -2)) * scale + lwc[:, None, None, :]
        if sig is not None:
            s = s - sig.view(1, -1, 1, 1).to(s.dtype) * _dist(pos, cen).unsqueeze(1)
        probs = None
        compressed = torch.matmul(_safe_softmax(s), vc)
    if probs is not None and grp == blk:
        importance = probs
    else:
        cnt = mask.view(bsz, p // grp, grp).sum(-1).clamp_min(1).to(q.dtype)
        qg = q.view(bsz, layer.n_heads, p // grp, grp, -1).sum(-2) / cnt[:, None, :, None]
        s = torch.matmul(qg, kc.transpose(-1, -2)) * scale + lwc[:, None, None, :]
        if sig is not None:
            gcen, _ = ball_centers(pos, mask, grp)
            s = s - sig.view(1, -1, 1, 1).to(s.dtype) * _dist(gcen, cen).unsqueeze(1)
        importance = _safe_softmax(s)
    allowed = torch.isfinite(lwc)[:, None, :]
    if layer.exclude_own_ball:
        g_ball = torch.arange(p // grp, device=q.device) * grp // ball
        b_ball = torch.arange(p // blk, device=q.device) * blk // ball
        allowed = allowed & (g_ball[:, None] != b_ball[None, :])[None]
    score = importance.sum(1)
    score = torch.where(allowed, score, torch.full((), -math.inf, dtype=score.dtype))
    val, idx = score.topk(min(layer.top_k, score.shape[-1]), dim=-1)
    return compressed, _selected(q, k, v, pos, logw, idx, torch.isfinite(val), grp, blk, layer.sigma_selected, scale)


def windowed_sparse_reference(layer, h, pos, mask, weights=None):
    """The compressed and selected branches ``(B, H, P, D)`` of a point-count ``layer`` (tree order), every window at
    once, as before the chunked windows."""
    bsz, p, _ = h.shape
    ball, blk, grp = layer.sizes(p)
    pos = pos.to(h.dtype)
    scale = 1.0 / math.sqrt(layer.head_dim)
    q, k, v = layer.project(h, pos, mask, ball, None)
    zero = torch.zeros((), dtype=h.dtype)
    q, k, v = (torch.where(mask[:, None, :, None], t, zero) for t in (q, k, v))
    pos = torch.where(mask[..., None], pos, zero)
    logw = prepare_key_logweights(weights, mask, (bsz, p), h.dtype, h.device, check=True)
    logq = torch.where(mask, zero, torch.full((), -math.inf, dtype=h.dtype))
    win = layer.window
    if win is None or p <= win:
        return _sparse(layer, q, k, v, pos, mask, logw, logq, ball, blk, grp, scale)
    nw, hh = p // win, layer.n_heads

    def split(t):
        if t.dim() == 4:
            return t.unflatten(2, (nw, win)).transpose(1, 2).flatten(0, 1)
        return t.unflatten(1, (nw, win)).flatten(0, 1)

    out = _sparse(layer, *(split(t) for t in (q, k, v, pos, mask, logw, logq)), ball, blk, grp, scale)
    return tuple(t.unflatten(0, (bsz, nw)).transpose(1, 2).reshape(bsz, hh, p, t.shape[-1]) for t in out)
