"""A float64 transcription of the published Functional Attention forward (xjffff/FUNCATTN @ c0c7ce7,
``PDE-StandardBenchmark/model/Functional_Attention_Irregular_Mesh_Shared.py`` and the layer
``FunctionalMap_Attention_Irregular_Mesh_Shared`` of ``Functional_attention.py``), written from their equations
in our own loops, head by head and basis function by basis function; the oracle of ``test_funcattn.py``.

As published: plain sums over the points (``w_i = 1``; ``w`` generalises them to quadrature weights), ``ε = 1e-5``,
the temperature **unclamped**, and the functional map formed explicitly in its dual form
``Z = ((1 - a) KᵀK + a I_d)^{-1} Kᵀ`` (``d × G``), ``C = Q Z`` (``G × G``), then ``C V``. ``shared=True``: one basis
projection (``basis.*``) for all blocks, as in the irregular-mesh model; ``False``: one per block
(``blocks.{l}.attn.own_basis.*``), the layout of the per-block (structured-mesh) model with Linear maps.
Parameters are read by the names of :class:`sciattn.operators.funcattn.FuncAttn`.
"""

from __future__ import annotations

import _token_checks as tc
import torch


def published_funcattn(p: dict, a: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, cfg: dict,
                       eps: float = 1e-5, shared: bool = True) -> torch.Tensor:
    """``a`` ``(B, N, C_in)`` at points ``x`` ``(B, N, d)`` -> ``(B, N, C_out)``; ``w`` ``(B, N)`` or ``None`` (the
    published plain sums)."""
    heads = cfg["n_heads"]
    dh = cfg["width"] // heads
    w = torch.ones(a.shape[:2], dtype=a.dtype) if w is None else w
    h = tc.lin(p, "lift.2", tc.gelu(tc.lin(p, "lift.0", torch.cat([x, a], -1)))) + p["placeholder"]
    for layer in range(cfg["n_layers"]):
        blk = f"blocks.{layer}"
        bas = "basis" if shared else f"{blk}.attn.own_basis"
        u = tc.ln(p, f"{blk}.ln1", h)
        xm, fm = tc.lin(p, f"{bas}.in_x", u), tc.lin(p, f"{bas}.in_f", u)
        a_ridge = 1 / (1 + torch.exp(-p[f"{blk}.attn.alpha"]))
        outs = []
        for hd in range(heads):
            cols = slice(hd * dh, (hd + 1) * dh)
            tau = p[f"{bas}.temperature"][0, hd, 0, 0]
            phi = tc.softmax(tc.lin(p, f"{bas}.basis", xm[..., cols]) / tau, -1)            # (B, N, G)
            g_num = phi.shape[-1]
            s = torch.zeros(a.shape[0], g_num, dh, dtype=a.dtype)
            for g in range(g_num):
                num = (w[..., None] * phi[..., g:g + 1] * fm[..., cols]).sum(1)
                den = (w * phi[..., g]).sum(1, keepdim=True) + eps
                s[:, g] = num / den
            q = s @ p[f"{blk}.attn.q.weight"].T
            k = s @ p[f"{blk}.attn.k.weight"].T
            v = s @ p[f"{blk}.attn.v.weight"].T
            kt = k.transpose(-1, -2)
            reg = (1 - a_ridge) * (kt @ k) + a_ridge * torch.eye(dh, dtype=a.dtype)
            z = torch.linalg.solve(reg, kt)                                                  # (B, d, G)
            c_map = q @ z                                                                    # (B, G, G)
            outs.append(phi @ (c_map @ v))
        h = h + tc.lin(p, f"{blk}.attn.out", torch.cat(outs, -1))
        h = h + tc.lin(p, f"{blk}.mlp.2", tc.gelu(tc.lin(p, f"{blk}.mlp.0", tc.ln(p, f"{blk}.ln2", h))))
    last = f"blocks.{cfg['n_layers'] - 1}"
    return tc.lin(p, f"{last}.head", tc.ln(p, f"{last}.ln3", h))
