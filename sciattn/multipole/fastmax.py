r"""Fastmax, factorable attention (Gerami, Hoover, Dulepet, Duraiswami, "FAST: Factorizable Attention for Speeding up
Transformers", arXiv 2402.07901; code armingerami/fastmax @ 28eb11a, ``example.py: fastmax_function``).

Softmax's ``exp`` is replaced by a polynomial, its truncated Taylor series ``f(s) = a0 + a1 s + a2 s²``
(``order`` 2; ``a0 + a1 s`` for ``order`` 1; published defaults ``(1, 1, 1/2)``), so the all-to-all kernel
factorises like a multipole expansion and is never formed. As an integral over the key points, with quadrature
weights ``w_j`` (normalised to sum to one; ``1/N`` the published uniform average) and ``s_ij = c q_i·k_j``::

    o(x_i) = ∫ f(c q(x_i)·k(y)) v(y) dμ(y) / ∫ f(c q(x_i)·k(y)) dμ(y)
           ≈ Σ_j w_j f(s_ij) ṽ_j [:E] / Σ_j w_j f(s_ij) ṽ_j [E]              ṽ_j = [v_j, 1]

    Σ_j w_j f(s_ij) ṽ_j = a0 M0 + a1 c q_i M1 + a2 c² (q_i ⊗ q_i) M2,
    M0 = Σ_j w_j ṽ_j,   M1 = Σ_j w_j k_j ṽ_jᵀ,   M2 = Σ_j w_j (k_j ⊗ k_j) ṽ_jᵀ       ("moments", per head)

at ``O(N D² E)`` cost and ``O(D² E)`` memory per head besides ``O(N D E)`` intermediates, instead of ``O(N² D)``.
The normalising denominator is the last column of the same moments: it takes the same weights. ``causal``:
prefix sums over ``j <= i`` (the published masked path), ``O(N D² E)`` memory.

``normalize`` scales ``q`` and ``k`` before the kernel:

- ``"max"`` (the published ``normalize=True``): ``q <- lim q / max_i |q_i|`` per sample and head, the maximum over
  the real points (padding excluded), likewise ``k``; then ``|s_ij| <= lim²`` and the kernel stays close to ``exp``.
- ``"token"``: ``q_i <- lim q_i / |q_i|``, per point (a local rule: no point rescales the others).
- ``None``: as given (the published ``normalize=False``, where the temperature is reset to 1).

``c = 1 / temperature`` (the published non-causal path always uses temperature 1).

The float64 oracle is :func:`sciattn.multipole.fastmax_reference.fastmax_dense`: the ``(Nq, Nk)`` matrix of the same
kernel. Shapes: ``q`` ``(B, H, Nq, D)``, ``k`` ``(B, H, Nk, D)``, ``v`` ``(B, H, Nk, E)``, ``weights`` ``(Nk,)``
or ``(B, Nk)``, ``mask`` ``(B, Nk)`` bool (True at real keys; with ``Nq == Nk`` it indexes the queries too).
Returns ``(B, H, Nq, E)``.
"""

from __future__ import annotations

import torch

from .._attention_inputs import check_key_weights_and_mask, check_qkv, mask_padding
from .._checks import check_attention_dtypes, check_positive_int, check_quadrature_weights
from ..domain import normalized_weights

__all__ = ["fastmax_attention", "check_fastmax_options", "fastmax_normalize", "NORMALIZE"]

#: The ``normalize`` choices (see the module docstring).
NORMALIZE = ("max", "token", None)


def check_fastmax_options(order: object, coefficients: object, normalize: object, lim: object,
                          temperature: object) -> tuple[float, ...]:
    """The kernel's options, else an error naming the argument; returns the coefficients as floats."""
    if order not in (1, 2) or isinstance(order, bool):
        raise ValueError(f"order: expected 1 or 2 (the Taylor order of the kernel), got {order!r}")
    if (not isinstance(coefficients, (tuple, list)) or len(coefficients) != order + 1
            or any(isinstance(a, bool) or not isinstance(a, (int, float)) for a in coefficients)):
        raise ValueError(f"coefficients: expected {order + 1} numbers (a0, ..., a{order}) for order {order}, "
                         f"got {coefficients!r}")
    if normalize not in NORMALIZE:
        raise ValueError(f"normalize: expected one of 'max', 'token' or None, got {normalize!r}")
    for name, value in (("lim", lim), ("temperature", temperature)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name}: expected a positive number, got {value!r}")
    return tuple(float(a) for a in coefficients)


def fastmax_normalize(t: torch.Tensor, normalize: str | None, lim: float, mask: torch.Tensor | None = None):
    """``t`` ``(B, H, N, D)`` scaled by the ``normalize`` rule; ``mask`` ``(B, N)`` excludes padded points from the
    maximum of ``"max"``. A zero norm is read as the smallest positive number (an all-zero ``t`` stays zero)."""
    if normalize is None:
        return t
    norm = torch.linalg.vector_norm(t, dim=-1, keepdim=True)  # (B, H, N, 1)
    if normalize == "max":
        if mask is not None:
            norm = torch.where(mask[:, None, :, None], norm, torch.zeros((), dtype=norm.dtype, device=norm.device))
        norm = norm.amax(dim=2, keepdim=True)
    return lim * t / norm.clamp_min(torch.finfo(t.dtype).tiny)


def _pieces(t, chunk):
    """``t`` ``(B, H, N, ·)`` in pieces of ``chunk`` points by ``split`` (whose backward is one concatenation; slicing
    would build a full-size zero gradient per piece, quadratic in N); one piece when ``N`` is symbolic
    (``torch.export`` with a dynamic size)."""
    return t.split(chunk, dim=2) if isinstance(t.shape[2], int) else (t,)


def _moments(k, vt, order, chunk):
    """``(M0 (B, H, 1, F), M1 (B, H, D, F), M2 (B, H, D, D·F) or None)`` accumulated over ``chunk`` points at a time
    (the intermediates ``k_j ⊗ vt_j`` of a chunk stay in cache); ``vt`` already carries the weights."""
    b, h, n, d = k.shape
    f = vt.shape[-1]
    m0, m1, m2 = vt.new_zeros(b, h, 1, f), vt.new_zeros(b, h, d, f), None
    if order == 2:
        m2 = vt.new_zeros(b, h, d, d * f)
    for kc, vc in zip(_pieces(k, chunk), _pieces(vt, chunk)):
        kct = kc.transpose(-1, -2)
        m0 = m0 + vc.sum(dim=2, keepdim=True)
        m1 = m1 + kct @ vc
        if m2 is not None:
            m2 = m2 + kct @ (kc[..., :, None] * vc[..., None, :]).reshape(b, h, -1, d * f)  # Σ k ⊗ k ⊗ vt
    return m0, m1, m2


def _moments_apply(q, k, vt, coeffs, c, chunk):
    """``Σ_j f(c q_i·k_j) vt_j`` by the moments (non-causal), ``chunk`` points at a time on both sides."""
    m0, m1, m2 = _moments(k, vt, len(coeffs) - 1, chunk)
    d, f = k.shape[-1], vt.shape[-1]
    outs = []
    for qc in _pieces(q, chunk):
        out = coeffs[0] * m0 + (coeffs[1] * c) * (qc @ m1)
        if m2 is not None:
            qm = (qc @ m2).reshape(*qc.shape[:3], d, f)  # Σ_d' q_d' M2[d', d, :]
            out = out + (coeffs[2] * c * c) * (qc[..., :, None] * qm).sum(dim=-2)
        outs.append(out)
    return torch.cat(outs, dim=2)


def _moments_apply_causal(q, k, vt, coeffs, c, chunk):
    """The prefix-sum form, ``Σ_{j<=i}``: running moments per point (the published masked path; not chunked)."""
    del chunk
    out = coeffs[0] * vt.cumsum(dim=2)
    m1 = (k[..., :, None] * vt[..., None, :]).cumsum(dim=2)  # (B, H, N, D, F)
    out = out + (coeffs[1] * c) * (q[..., None, :] @ m1).squeeze(-2)
    if len(coeffs) == 3:
        kk = (k[..., :, None] * k[..., None, :]).flatten(-2)  # (B, H, N, D²)
        m2 = (kk[..., :, None] * vt[..., None, :]).cumsum(dim=2)
        qq = (q[..., :, None] * q[..., None, :]).flatten(-2)
        out = out + (coeffs[2] * c * c) * (qq[..., None, :] @ m2).squeeze(-2)
    return out


def fastmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weights: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    *,
    order: int = 2,
    coefficients: tuple[float, ...] | None = None,
    normalize: str | None = "max",
    lim: float = 1.0,
    temperature: float = 1.0,
    causal: bool = False,
    chunk: int = 512,
) -> torch.Tensor:
    """Fastmax attention by its factorised moments (module docstring), with quadrature weights on every sum.

    Args:
        q, k, v: ``(B, H, Nq, D)``, ``(B, H, Nk, D)``, ``(B, H, Nk, E)``, floating, one dtype (float16 and
            bfloat16 are computed in float32 and the output cast back).
        weights: ``(Nk,)`` or ``(B, Nk)`` quadrature weights of the keys (None: uniform, the published average);
            finite and ``>= 0`` at real keys with a positive total per sample, else ``ValueError``.
        mask: ``(B, Nk)`` bool, True at real keys; padded keys, values and weights are never read.
        order: 1 or 2, the Taylor order of the kernel.
        coefficients: ``(a0, a1[, a2])``; default the Taylor coefficients of ``exp``, ``(1, 1, 0.5)``.
            With ``(1, 1, 0.5)`` the kernel is positive for every ``s``; ``order`` 1's ``1 + s`` needs
            ``|s| < 1`` (``normalize`` with ``lim < 1``) for a positive denominator.
        normalize: ``"max"`` (published), ``"token"`` or ``None``; ``lim``: the radius they scale to.
        temperature: ``s_ij = q_i·k_j / temperature``.
        causal: only keys ``j <= i`` (needs ``Nq == Nk``).
        chunk: points per step when forming and applying the moments (a cache size: the answer is the same up
            to the order of the sums).

    Returns:
        ``(B, H, Nq, E)``.
    """
    if coefficients is None:
        coefficients = (1.0, 1.0, 0.5)[: order + 1] if order in (1, 2) else ()
    coeffs = check_fastmax_options(order, coefficients, normalize, lim, temperature)
    check_attention_dtypes(q, k, v, weights=weights)
    b, h, nk, _ = check_qkv(q, k, v)
    check_key_weights_and_mask(weights, mask, b, nk, "the key/value points")
    check_quadrature_weights("weights", weights, mask, need_mass=True)
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {causal!r}")
    check_positive_int("chunk", chunk)
    if causal and q.shape[2] != nk:
        raise ValueError(f"causal: expected as many queries as keys, got Nq={q.shape[2]} and Nk={nk}")
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):  # moments accumulate in float32 (cancellation in a0 + a1 s + a2 s²)
        q, k, v = q.float(), k.float(), v.float()
    w = normalized_weights(weights, mask, (b, nk), q.dtype, q.device)
    if mask is not None:
        q, k, v = mask_padding(q, k, v, mask)
    qmask = mask if mask is not None and q.shape[2] == nk else None
    q = fastmax_normalize(q, normalize, lim, qmask)
    k = fastmax_normalize(k, normalize, lim, mask)
    ones = torch.ones((*v.shape[:3], 1), dtype=v.dtype, device=v.device)
    vt = torch.cat([v, ones], dim=-1) * w[:, None, :, None].to(v.dtype)  # weighted [v, 1]
    apply = _moments_apply_causal if causal else _moments_apply
    out = apply(q, k, vt, coeffs, 1.0 / temperature, chunk)
    return (out[..., :-1] / out[..., -1:]).to(dtype)
