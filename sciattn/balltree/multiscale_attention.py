r"""Multiscale ball attention: a physical ball's integral as a pooled far field plus a near-field window.

For a query ``x_i`` in the ball cell ``β(i)`` (a cell of fixed physical size, :mod:`sciattn.balltree.multiscale`),
with quadrature weights ``w_j`` of the keys, per head:

.. math::
    z_i = γ_h\, F_i + N_i ,\qquad
    F_i = \frac{\sum_{c \subset β(i)} W_c\, e^{s(q_i, \bar k_c) - σ^F_h \lVert x_i - \bar x_c \rVert}\, \bar v_c}
               {\sum_{c \subset β(i)} W_c\, e^{s(q_i, \bar k_c) - σ^F_h \lVert x_i - \bar x_c \rVert}} ,\qquad
    N_i = \frac{\sum_{j \in ω(i)} w_j\, e^{s(q_i, k_j) - σ_h \lVert x_i - x_j \rVert}\, v_j}
               {\sum_{j \in ω(i)} w_j\, e^{s(q_i, k_j) - σ_h \lVert x_i - x_j \rVert}} .

* **Far field** ``F``: the key cells ``c`` of the ball (a fixed physical size ``key_diameter``) pool the keys,
  values and positions by their quadrature means, ``k̄_c = Σ_{j∈c} w_j k_j / W_c`` (likewise ``v̄``, ``x̄``),
  ``W_c = Σ_{j∈c} w_j``: a quadrature of ``∫_{β(i)} e^{s(q(x), k(y))} v(y) dμ(y)`` normalised, with one node per
  key cell. Every piece is a mean over a region that does not move under refinement, so ``F`` converges
  as the sampling is refined, and each query sees at most the key cells of one ball, a number set by the
  lengths: cost ``O(n · #key cells per ball)``. With key cells holding at most one point each it is exactly
  the physical mode's ball attention (:mod:`sciattn.balltree.physical`; a test checks it).
* **Near field** ``N``: softmax attention over the ``m`` slots of the query's window ``ω(i)`` (consecutive in
  the layout's k-d order: its ``m`` nearest points along the curve). It covers what the key cells average
  out; its extent shrinks like ``(m/n)^{1/d}`` under refinement, so on a continuous field it tends to the
  pointwise value ``v(x_i)`` at first order: the one resolution-dependent piece, and a vanishing one (as the
  local term of :class:`~sciattn.multipole.MultipoleAttention`). Cost ``O(n · m)``. ``window=None``: no near
  field (``z = F``, no ``γ``), for levels whose tokens are cells (a fixed set), where ``F`` over one-token key
  cells is exact.

``γ_h`` (learned, initialised to 1) weighs the far field per head. The position encoding is relative to the
ball cell's geometric centre (as the physical mode). Padding slots never act as keys, and ``F`` and ``N``
are zero for a query with no admissible key.

Shapes: tokens ``(B, P, C)`` in the layout's slot order, positions ``(B, P, d)``, mask / weights ``(B, P)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._checks import check_finite_at, check_input_dtype
from .module import BallAttention, check_point_inputs
from .multiscale import FarField, multiscale_layout
from .physical import check_length, cloud_box, lattice_for
from .tree import check_power_of_two

__all__ = ["MultiscaleBallAttention", "multiscale_attention", "pool_keys"]

# score entries per SDPA call of the far field on the CPU (as sciattn._blocked_sdpa.CPU_SCORES_PER_CALL)
_CPU_SCORES_PER_CALL = 1 << 20


def pool_keys(t: torch.Tensor, w: torch.Tensor, index: torch.Tensor, n_cells: int) -> torch.Tensor:
    """``Σ_{j∈c} w_j t_j`` per cell: ``t`` ``(B, H, P, D)``, ``w`` ``(B, P)`` (zero on padding), ``index`` ``(B, P)``
    in ``[0, n_cells]`` -> ``(B, H, n_cells + 1, D)`` (the last cell collects the padding slots, with weight 0)."""
    b, h, p, dd = t.shape
    out = t.new_zeros(b, h, n_cells + 1, dd)
    return out.scatter_add(2, index[:, None, :, None].expand(b, h, p, dd), t * w[:, None, :, None].to(t.dtype))


def _log(x: torch.Tensor) -> torch.Tensor:
    """``log x`` where ``x > 0``, ``-inf`` elsewhere (no NaN gradient at 0)."""
    return torch.where(x > 0, torch.log(torch.where(x > 0, x, 1)), -math.inf)


def multiscale_attention(q, k, v, pos, weights, mask, far: FarField, sigma, scale: float) -> torch.Tensor:
    """``z_i`` of the module docstring: every window of ``m`` queries against its own points and the key cells of
    the balls that meet it (one softmax; a query's keys restricted to its own ball).

    Shapes: q, k ``(B, H, P, D)``, v ``(B, H, P, E)``, pos ``(B, P, d)``, weights ``(B, P)`` or None (uniform),
    mask ``(B, P)``, sigma ``(H,)`` or None -> ``(B, H, P, E)``.
    """
    b, h, p, dq = q.shape
    e, d = v.shape[-1], pos.shape[-1]
    m, nk = far.window, far.n_keys
    nw, kk = far.window_keys.shape[1:]
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    w = mask.to(q.dtype) if weights is None else torch.where(mask, weights.to(q.dtype), zero)
    idx = far.key_index
    big_w = w.new_zeros(b, nk + 1).scatter_add(1, idx, w)  # W_c; 0 for the dummy cell
    inv = torch.where(big_w > 0, 1 / torch.where(big_w > 0, big_w, 1), zero)
    kc = pool_keys(k, w, idx, nk) * inv[:, None, :, None]
    vc = pool_keys(v, w, idx, nk) * inv[:, None, :, None]
    x = pos.detach()
    xc = w.new_zeros(b, nk + 1, d).scatter_add(1, idx[..., None].expand(b, p, d), x * w[..., None]) * inv[..., None]
    # residual mass of every key cell outside the window, R_c = W_c - Σ_{j ∈ c ∩ window} w_j (cells are slot runs)
    prefix = F.pad(w.cumsum(1), (1, 0))  # (B, P + 1): Σ_{j < s} w_j
    wk = far.window_keys  # (B, nw, K)
    cs, ce = far.key_start.gather(1, wk.view(b, -1)).view(b, nw, kk), far.key_end.gather(1, wk.view(b, -1)).view(b, nw, kk)
    a0 = (torch.arange(nw, device=q.device) * m).view(1, nw, 1)
    lo, hi = torch.maximum(cs, a0), torch.minimum(ce, a0 + m)
    inside_mass = torch.where(hi > lo, prefix.gather(1, hi.clamp(0, p).view(b, -1)).view(b, nw, kk)
                              - prefix.gather(1, lo.clamp(0, p).view(b, -1)).view(b, nw, kk), zero)
    whole = (cs >= a0) & (ce <= a0 + m)
    resid = torch.where(whole, zero, (big_w.gather(1, wk.view(b, -1)).view(b, nw, kk) - inside_mass).clamp_min(0))
    cell_ball = far.key_ball.gather(1, wk.view(b, -1)).view(b, nw, kk)
    q_ball = far.slot_ball.view(b, nw, m)
    # the admissible keys of every query and their log-weights: the window's points of its ball, its ball's cells
    bias = torch.cat([torch.where(q_ball[..., :, None] == q_ball[..., None, :], _log(w).view(b, nw, 1, m), -math.inf),
                      torch.where(q_ball[..., :, None] == cell_ball[:, :, None, :], _log(resid)[:, :, None, :],
                                  -math.inf)], dim=-1)  # (B, nw, m, m + K)
    empty = torch.isinf(bias).all(-1)  # (B, nw, m): a query with no admissible key returns zero
    bias = torch.where(empty[..., None], zero, bias)
    fi = wk.reshape(b, nw * kk)
    # every tensor is gathered once at full size and split into chunks (the backward of a split is one
    # concatenation; slicing or gathering per chunk would allocate a full-size zero gradient per chunk)
    keys = torch.cat([k.view(b, h, nw, m, dq), kc.gather(2, fi[:, None, :, None].expand(b, h, nw * kk, dq))
                      .view(b, h, nw, kk, dq)], 3)
    vals = torch.cat([v.view(b, h, nw, m, e), vc.gather(2, fi[:, None, :, None].expand(b, h, nw * kk, e))
                      .view(b, h, nw, kk, e)], 3)
    dist = None
    if sigma is not None:
        xq = x.view(b, nw, m, d)
        xk = torch.cat([xq, xc.gather(1, fi[..., None].expand(b, nw * kk, d)).view(b, nw, kk, d)], dim=2)
        dist = torch.cdist(xq, xk, compute_mode="donot_use_mm_for_euclid_dist").to(q.dtype)  # (B, nw, m, m + K)
    if q.device.type == "cpu" and not torch.compiler.is_compiling():
        per = max(1, _CPU_SCORES_PER_CALL // max(1, b * h * m * (m + kk)))
    else:
        per = nw
    chunks = zip(q.view(b, h, nw, m, dq).split(per, 2), keys.split(per, 2), vals.split(per, 2), bias.split(per, 1),
                 dist.split(per, 1) if dist is not None else [None] * (-(-nw // per)))
    parts = []
    for qc, kc_, vc_, bc, dc in chunks:
        mc = qc.shape[2]
        bc = bc.unsqueeze(1)  # (B, 1, mc, m, m + K)
        if dc is not None:
            bc = bc - sigma.to(q.dtype).view(1, h, 1, 1, 1) * dc.unsqueeze(1)
        out = F.scaled_dot_product_attention(
            qc.reshape(b, h * mc, m, dq), kc_.reshape(b, h * mc, m + kk, dq), vc_.reshape(b, h * mc, m + kk, e),
            attn_mask=bc.expand(b, h, mc, m, m + kk).reshape(b, h * mc, m, m + kk), scale=scale)
        parts.append(out.view(b, h, mc, m, e))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    out = torch.where(empty[:, None, ..., None], zero, out)
    return out.reshape(b, h, p, e)


class MultiscaleBallAttention(BallAttention):
    """Multiscale ball attention (module docstring): the ball's key cells, with the window's own points exact.

    Args:
        dim, n_heads, spatial_dims, rpe, distance_bias, sigma_init, backend: as :class:`BallAttention` (the
            parameters are the same: one softmax, one distance-bias scale ``σ_h`` per head).
        ball_diameter: the ball cell's diameter (a length in the units of ``pos``).
        key_diameter: the key cells' diameter (``<= ball_diameter``).
        near_points: slots of the near-field window of the layout :meth:`forward` builds (a power of two;
            :meth:`attend` takes the window of the layout it is given).

    Shapes: :meth:`forward` ``x (B, N, C)``, ``pos (B, N, d)``, mask / weights ``(B, N)`` -> ``(B, N, C)``;
    :meth:`attend` ``h (B, P, C)`` in slot order with ``far`` the layout's :class:`FarField` -> ``(B, P, C)``.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        spatial_dims: int = 3,
        *,
        ball_diameter: float,
        key_diameter: float,
        near_points: int = 64,
        rpe: bool = True,
        distance_bias: bool = True,
        sigma_init: float = 1.0,
        backend: str | None = None,
    ) -> None:
        super().__init__(dim, n_heads, spatial_dims, None, ball_diameter=ball_diameter, rpe=rpe,
                         distance_bias=distance_bias, sigma_init=sigma_init, backend=backend)
        self.key_diameter = check_length("key_diameter", key_diameter)
        if self.key_diameter > self.ball_diameter:
            raise ValueError(f"key_diameter: expected a length <= ball_diameter={self.ball_diameter}, "
                             f"got {key_diameter}")
        self.near_points = check_power_of_two("near_points", near_points)

    def layout(self, pos: torch.Tensor, mask: torch.Tensor | None = None, rotate=None):
        """The :func:`~sciattn.balltree.multiscale.multiscale_layout` of ``pos (B, N, d)`` for this layer's lengths
        (the box of every cloud's real points, on the lattice of the lengths)."""
        box = cloud_box(pos, mask, lattice_for([self.ball_diameter, self.key_diameter]))
        return multiscale_layout(pos, mask, box, ball=self.ball_diameter, key=self.key_diameter,
                                 window=self.near_points, unit=min(16, self.near_points), rotate=rotate)

    def forward(self, x, pos, mask=None, weights=None, tree=None, sizes=None):
        """Point order: lay ``pos`` out (:meth:`layout`), attend, and return to point order ``(B, N, C)``."""
        if tree is not None or sizes is not None:
            raise ValueError("tree: expected None (the multiscale layer lays the points out itself; use attend() "
                             "with a layout's far field to reuse one), got a tree")
        check_point_inputs(x, pos, mask, weights, self.dim, self.spatial_dims)
        check_input_dtype("x", x, self)
        check_finite_at("x", x, None if mask is None else mask[..., None])
        lay = self.layout(pos, mask)
        t = lay.tree
        w = None if weights is None else t.values_to_tree(weights.to(x.dtype))
        return t.from_tree(self.attend(t.to_tree(x), t.pos, t.mask, w, centres=lay.centres, far=lay.far))

    def attend(self, h, pos, mask=None, weights=None, sizes=None, centres=None, far: FarField | None = None):
        """Multiscale attention and the output projection, in slot order ``(B, P, C)``."""
        if far is None:
            raise ValueError("far: expected the FarField of the layout (multiscale_layout(...).far), got None")
        b, p, _ = h.shape
        if mask is None:
            mask = torch.ones(b, p, dtype=torch.bool, device=h.device)
        pos = pos.to(h.dtype)
        q, k, v = self.project(h, pos, mask, far.window, centres)
        zero = torch.zeros((), dtype=h.dtype, device=h.device)
        q, k, v = (torch.where(mask[:, None, :, None], t, zero) for t in (q, k, v))
        z = multiscale_attention(q, k, v, pos, weights, mask, far, self.sigma, 1.0 / math.sqrt(self.head_dim))
        return self.proj(z.transpose(1, 2).flatten(2))

    def extra_repr(self) -> str:
        return super().extra_repr() + f", key_diameter={self.key_diameter}, near_points={self.near_points}"
