"""The machinery of the ``codano_fewshot`` benchmark (:mod:`benchmarks.codano_fewshot`): the three models,
the coupled Navier–Stokes / Boussinesq pairs, the exact symmetries of the forced system (diagonal shifts and the
half-turn), the shared training loop and the test metrics.

Imported by the benchmark's ``run`` only, so that ``python -m benchmarks list`` does not import torch.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import sys
import time

import numpy as np
import torch

from .codano_fewshot import (
    ANCHOR_HIDDEN,
    AUGMENTATIONS,
    BOUS_VARS,
    FNO_HIDDEN,
    GRAD_CLIP,
    LR,
    MASK_FRACTION,
    METRICS,
    MODES,
    NS_VARS,
    WEIGHT_DECAY,
    WRAPPERS,
)


# ----------------------------------------------------------------------------------------- models
def build_ours(n_modes: int, *, width: int, n_heads: int, head_channels: int, mlp_ratio: int):
    """CoDANO over the NS variables; the size keywords as in :data:`OURS`."""
    from sciattn.operators import create_operator

    return create_operator("codano", variables=list(NS_VARS), width=width, n_layers=4, n_heads=n_heads,
                           head_channels=head_channels, n_modes=n_modes, pos_channels=4, pos_modes=4,
                           mlp_ratio=mlp_ratio)


class AnchorAdapter(torch.nn.Module):
    """The thinnest adapter around ``neuralop.models.CODANO`` (its maths untouched).

    * ``forward(x, variables, masked)``: names go to ``input_variable_ids``; masked channels are set to
      zero (CODANO has no mask token); any other keyword (e.g. ``y``) is dropped: CODANO's forward
      has no ``**kwargs``, so ``model(**{"x": x, "y": y})`` (what ``neuralop.Trainer`` does) fails.
    * ``add_variable(name)``: ``_extend_positional_encoding([name])`` (a list: a bare string would be
      iterated character by character); ``add_variable(name, like=other)`` then copies ``other``'s
      encoding into the new one, as ours does (a choice of initial value, not of the maths).
    """

    def __init__(self, hidden: int, n_modes: int):
        super().__init__()
        from neuralop.models import CODANO

        n_layers = 4
        with contextlib.redirect_stdout(io.StringIO()):  # CODALayer.__init__ prints a debug line
            self.model = CODANO(
                output_variable_codimension=1, lifting_channels=2 * hidden, hidden_variable_codimension=hidden,
                projection_channels=2 * hidden, use_positional_encoding=True, positional_encoding_dim=4,
                positional_encoding_modes=[8, 8],  # a fresh list: the constructor halves the last entry in place
                variable_ids=list(NS_VARS), n_layers=n_layers, n_modes=[[n_modes, n_modes]] * n_layers,
                # 2.0.0 checks len() before None: every per-layer list must be given explicitly
                n_heads=[2] * n_layers, attention_scaling_factors=[1] * n_layers,
                per_layer_scaling_factors=[[1, 1]] * n_layers,
                attention_token_dim=hidden, per_channel_attention=False,  # one token per variable, as ours
                domain_padding=None,  # periodic data: no zero padding (the default 0.25 pads for non-periodic)
                layer_kwargs={"head_codimension": hidden // 2})

    def add_variable(self, name: str, like: str | None = None) -> None:
        self.model._extend_positional_encoding([name])
        if like is not None:
            with torch.no_grad():
                self.model.positional_encoding[name].copy_(self.model.positional_encoding[like])

    def forward(self, x, variables, masked=None, **_ignored):
        if masked is not None:
            x = x * (~masked)[:, :, None, None].to(x.dtype)
        return self.model(x, input_variable_ids=list(variables))


def build_fno(hidden: int, n_modes: int):
    from neuralop.models import FNO

    return FNO(n_modes=(n_modes, n_modes), in_channels=len(BOUS_VARS), out_channels=len(BOUS_VARS),
               hidden_channels=hidden, n_layers=4)


def call(kind: str, model, x, names, masked=None):
    if kind == "fno":
        return model(x)
    return model(x, variables=names, masked=masked)


def predict(kind, model, x, names, masked=None, residual=True):
    out = call(kind, model, x, names, masked)
    if not residual:
        return out
    base = x if masked is None else x * (~masked)[:, :, None, None].to(x.dtype)
    return base + out


def count_parameters(model) -> int:
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())


# ------------------------------------------------------------------------------------------ data
def load(cache, cfg, *, seed: int, beta: float):
    """The NS pretraining pairs and the Boussinesq pool / test pairs of ``cfg`` (sizes), generated (or read
    from ``cache``) with ``seed`` and the buoyancy ``beta``; tensors ``(n, V, res, res)``."""
    from sciattn.pde_data.coupled_navier_stokes import load_or_generate_coupled_navier_stokes

    common = dict(fine_resolution=cfg["fine"], seed=seed, progress=False)
    ns = load_or_generate_coupled_navier_stokes(cache, cfg["ns_train"] + cfg["ns_test"], [cfg["res"]],
                                                system="ns", **common)
    bo = load_or_generate_coupled_navier_stokes(cache, cfg["pool"] + cfg["test"], [cfg["res"]],
                                                system="boussinesq", beta=beta, **common)
    assert list(ns.variables) == NS_VARS and list(bo.variables) == BOUS_VARS
    (nx, ny), (bx, by) = ns.pairs[cfg["res"]], bo.pairs[cfg["res"]]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    k, p = cfg["ns_train"], cfg["pool"]
    return {"ns_train": (t(nx[:k]), t(ny[:k])), "ns_test": (t(nx[k:]), t(ny[k:])),
            "pool": (t(bx[:p]), t(by[:p])), "test": (t(bx[p:]), t(by[p:]))}


def rms(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-variable RMS over samples, both times and space: ``(V,)``."""
    return torch.cat([x, y]).transpose(0, 1).flatten(1).square().mean(1).sqrt()


def scaled(pair, scale):
    s = scale[None, :, None, None]
    return pair[0] / s, pair[1] / s


# ------------------------------------------------------------------------------------- training
def per_variable_rel_l2(pred, target):
    """``(B, V)`` relative L2 per sample and variable (neuraloperator LpLoss before its reduction)."""
    d = (pred - target).flatten(2).norm(dim=-1)
    return d / (target.flatten(2).norm(dim=-1) + 1e-8)


def diagonal_shift(x: torch.Tensor, y: torch.Tensor, gen: torch.Generator):
    """Roll each pair ``(x_i, y_i)`` by ``(s_i, -s_i)`` grid cells, ``s_i`` uniform in ``0..r-1``.

    An exact symmetry of both systems on the torus: advection, diffusion and buoyancy
    (``beta theta_x``) commute with every translation, and FNO's forcing depends on ``x + y`` only,
    which a shift along ``(1, -1)`` leaves unchanged. ``x``, ``y``: ``(B, V, r, r)``.
    """
    shifts = torch.randint(0, x.shape[-1], (x.shape[0],), generator=gen).tolist()
    roll = lambda a: torch.stack([a[i].roll((s, -s), dims=(-2, -1)) for i, s in enumerate(shifts)])  # noqa: E731
    return roll(x), roll(y)


#: Each variable's factor under the half-turn: velocity components turn with the flow (sign flip),
#: the vorticity is a scalar under rotations, and theta flips because gravity turns too (buoyancy
#: ``(0, beta theta)`` is then unchanged).
HALF_TURN_SIGN = {"u": -1.0, "v": -1.0, "w": 1.0, "theta": -1.0}


def half_turn(a: torch.Tensor, names) -> torch.Tensor:
    """Turn fields ``(B, V, r, r)`` by π about ``(1/8, 0)``: ``(x, y) -> (1/4 - x, -y)``, i.e. grid index
    ``(i, j) -> (r/4 - i, -j) mod r``, each variable times :data:`HALF_TURN_SIGN`.

    ``x + y -> 1/4 - (x + y)`` leaves FNO's forcing ``0.1 (sin 2π(x+y) + cos 2π(x+y))`` unchanged, so
    with the signs this is an exact symmetry of both systems (any β). ``r`` must be a multiple of 4.
    """
    r = a.shape[-1]
    if r % 4 or a.shape[-2] != r:
        raise ValueError(f"a: expected a square grid whose size is a multiple of 4, got {tuple(a.shape[-2:])}")
    unknown = [n for n in names if n not in HALF_TURN_SIGN]
    if unknown or len(names) != a.shape[1]:
        raise ValueError(f"names: expected {a.shape[1]} names from {sorted(HALF_TURN_SIGN)}, got {list(names)}")
    i = (r // 4 - torch.arange(r)) % r
    j = (-torch.arange(r)) % r
    sign = torch.tensor([HALF_TURN_SIGN[n] for n in names], dtype=a.dtype)[None, :, None, None]
    return sign * a[..., i, :][..., j]


def augment_pairs(x: torch.Tensor, y: torch.Tensor, names, gen: torch.Generator, augment: str):
    """``"shift"``: :func:`diagonal_shift`; ``"symmetry"``: that, then :func:`half_turn` of each pair with
    probability 1/2 (the shifts draw first, so both modes shift alike); ``"none"``: unchanged."""
    if augment == "none":
        return x, y
    x, y = diagonal_shift(x, y, gen)
    if augment == "symmetry":
        turn = (torch.rand(x.shape[0], generator=gen) < 0.5)[:, None, None, None]
        x, y = torch.where(turn, half_turn(x, names), x), torch.where(turn, half_turn(y, names), y)
    return x, y


def train(kind, model, data, names, *, steps, batch, lr, seed, residual, mask_fraction=0.0, augment="none",
          log_every=50):
    from sciattn._checks import check_choice
    from sciattn.train.training.losses import relative_l2

    check_choice("augment", augment, AUGMENTATIONS)

    x_all, y_all = data
    n = x_all.shape[0]
    batch = min(batch, n)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    model.train()
    order, pos, losses = torch.randperm(n, generator=gen), 0, []
    t0 = time.perf_counter()
    for step in range(steps):
        if pos + batch > n:
            order, pos = torch.randperm(n, generator=gen), 0
        idx = order[pos:pos + batch]
        pos += batch
        x, y = x_all[idx], y_all[idx]
        x, y = augment_pairs(x, y, names, gen, augment)
        masked = None
        if mask_fraction > 0:
            which = torch.randint(0, x.shape[1], (x.shape[0],), generator=gen)
            on = torch.rand(x.shape[0], generator=gen) < mask_fraction
            masked = torch.zeros(x.shape[0], x.shape[1], dtype=torch.bool)
            masked[torch.arange(x.shape[0])[on], which[on]] = True
        loss = relative_l2(predict(kind, model, x, names, masked, residual), y, 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            log(f"    step {step + 1}/{steps} loss {np.mean(losses[-log_every:]):.4f} "
                  f"({time.perf_counter() - t0:.0f}s)")
    tail = max(1, min(20, steps // 5))
    return {"seconds": time.perf_counter() - t0, "steps": steps, "batch": batch, "lr": lr,
            "final_train_loss": float(np.mean(losses[-tail:]))}


def half_turn_averaged_predict(kind, model, x, names, residual=True):
    """``½ (P(x) + T P(T x))``: :func:`predict` averaged over the half-turn ``T`` (:func:`half_turn`, an
    involution, so ``T⁻¹ = T``).

    The average is exactly equivariant to the half-turn, an exact symmetry of the forced system, for any
    model ``P``; it removes the part of ``P``'s prediction that the symmetry says must be zero (and
    changes nothing for a model that is already equivariant). Two forward passes; ``x`` ``(B, V, r, r)``.
    """
    turned = half_turn(predict(kind, model, half_turn(x, names), names, None, residual), names)
    return 0.5 * (predict(kind, model, x, names, None, residual) + turned)


@torch.no_grad()
def evaluate(kind, model, data, names, residual, batch=10, half_turn_average=False):
    """Mean and per-variable test relative L2 of ``predict`` (or, with ``half_turn_average``, of
    :func:`half_turn_averaged_predict`) over ``data = (x, y)``."""
    model.eval()
    x_all, y_all = data
    fn = half_turn_averaged_predict if half_turn_average else predict
    errs = [per_variable_rel_l2(fn(kind, model, x_all[i:i + batch], names, residual=residual), y_all[i:i + batch])
            for i in range(0, x_all.shape[0], batch)]
    e = torch.cat(errs)  # (N, V)
    return {"all": e.mean().item(), **{v: e[:, j].mean().item() for j, v in enumerate(names)}}


# ------------------------------------------------------------------------------------ protocol
def pretrain_codomain_models(ns_train, ns_test, cfg, *, seed, residual, ours):
    """Pretrain CoDANO (size ``ours``) and the anchor on NS masked one-step prediction.

    Returns ``(results, pretrained)``: a result entry per model (the FNO's with no pretraining) and
    the two pretrained codomain models by name.
    """
    builders = {"CoDANO (sciattn)": ("ours", lambda: build_ours(n_modes=MODES, **ours)),
                "CODANO (neuralop 2.0)": ("anchor", lambda: AnchorAdapter(ANCHOR_HIDDEN, MODES))}
    results, pretrained = {}, {}
    for name, (kind, build) in builders.items():
        torch.manual_seed(seed)
        model = build()
        log(f"[pretrain] {name}: {count_parameters(model):,} parameters")
        info = train(kind, model, ns_train, NS_VARS, steps=cfg["pretrain_steps"], batch=cfg["batch"],
                     lr=LR["pretrain"], seed=seed, residual=residual, mask_fraction=MASK_FRACTION)
        info["ns_test"] = evaluate(kind, model, ns_test, NS_VARS, residual)
        info["parameters"] = count_parameters(model)
        log(f"  NS held-out {info['ns_test']}")
        pretrained[name] = model
        results[name] = {"kind": kind, "wrapper": WRAPPERS[name], "pretrain": info, "finetune": {}}
    results["FNO (from scratch)"] = {"kind": "fno", "wrapper": WRAPPERS["FNO (from scratch)"], "pretrain": None,
                                     "finetune": {}}
    return results, pretrained


def fewshot_split(data, ns_scale, n):
    """Scaled ``(train, test)``: the first ``n`` pool pairs and the test pairs, ``theta``'s scale from the
    ``n`` training pairs."""
    px, py = data["pool"][0][:n], data["pool"][1][:n]
    scale = torch.cat([ns_scale, rms(px[:, 3:], py[:, 3:])])
    return scaled((px, py), scale), scaled(data["test"], scale)


def finetune_and_test(name, r, pretrained, train_set, test_set, cfg, *, seed, n, residual, augment, theta_like):
    """Fine-tune a copy of the pretrained ``name`` (with ``theta`` added) or a fresh FNO on
    ``train_set``; returns the training info with its ``"test"`` errors. Records the model's
    parameter count and, once, its zero-shot errors in ``r``."""
    kind = r["kind"]
    torch.manual_seed(seed + n)
    if kind == "fno":
        model, lr = build_fno(FNO_HIDDEN, MODES), LR["scratch"]
    else:
        model, lr = copy.deepcopy(pretrained[name]), LR["finetune"]
        model.add_variable("theta", like=theta_like)
        if "zero_shot" not in r:  # pretrained weights, theta's encoding fresh or copied (theta_like)
            r["zero_shot"] = evaluate(kind, model, test_set, BOUS_VARS, residual)
    r["parameters"] = count_parameters(model)
    log(f"[fine-tune n={n}] {name}: {r['parameters']:,} parameters")
    info = train(kind, model, train_set, BOUS_VARS, steps=cfg["finetune_steps"], batch=cfg["batch"], lr=lr,
                 seed=seed + n, residual=residual, augment=augment, log_every=0)
    for key in METRICS:
        info[key] = evaluate(kind, model, test_set, BOUS_VARS, residual, half_turn_average=key != "test")
        log(f"  {key} {json.dumps({k: round(v, 4) for k, v in info[key].items()})} ({info['seconds']:.0f}s)")
    return info


def log(text: str) -> None:
    """Progress on stderr (stdout is the table)."""
    print(text, file=sys.stderr, flush=True)
