"""Robustness of ``sciattn.operators.create_operator`` (issue 23): for every registered operator an
unknown key, a missing required key, a non-JSON value and bad hyperparameter values; and bad inputs
to a tiny instance's ``forward`` (wrong ranks and channel counts)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from sciattn.operators import create_operator, list_operators

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cases import Case, parametrize, run_case  # noqa: E402

# the smallest valid config of each operator
VALID = {
    "galerkin_transformer": dict(in_channels=1, out_channels=1, d_model=8, n_layers=1, n_heads=2, n_modes=2,
                                 regressor_width=4),
    "mano": dict(in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2, window=2),
    "mano_extended": dict(in_channels=1, out_channels=1, width=8, n_layers=1, n_heads=2, window=2, head_width=4,
                          head_modes=2, head_layers=1, head_grid=None, lift_spacing=None, rel_pos_bias=1),
    "codano": dict(variables=["a", "u"], width=4, n_layers=1, n_heads=1, n_modes=2),
    "erwin": dict(in_channels=1, out_channels=1, c_hidden=(8, 8), ball_sizes=(4, 4), enc_depths=(1, 1),
                  dec_depths=(1,), strides=(2,), n_heads=2),
    "bsa_transformer": dict(in_channels=1, out_channels=1, width=8, depth=1, n_heads=2, ball_size=4, block_size=2),
    "spherical_transformer": dict(in_channels=1, out_channels=1, nlat=4, nlon=8, embed_dim=4, n_layers=1),
    "planar_transformer": dict(in_channels=1, out_channels=1, nlat=4, nlon=8, embed_dim=4, n_layers=1),
    "transolver": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, slice_num=2),
    "linear_no": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, key_ratio=2),
    "ono": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, psi_dim=2),
    "gnot": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, mlp_layers=0),
    "factformer": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, dim_head=2, rff_features=2),
    "oformer": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, dim_head=2, latent_width=4,
                    rff_features=2),
    "fno": dict(in_channels=1, out_channels=1, n_modes=2, hidden_channels=4, n_layers=1),
    "anie": dict(in_channels=1, out_channels=1, state_channels=2, width=4, n_layers=1, n_heads=2, dim_ff=4),
    "funcattn": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, basis_num=2),
    "fastmax_transformer": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, dim_ff=4),
    "schwarz_transformer": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, subdomains=2),
    "continuum_transformer": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, dim_ff=4),
    "continuum_vitno": dict(in_channels=1, out_channels=1, width=4, n_layers=1, n_heads=2, dim_ff=4, modes=2,
                            smoothing_modes=2),
    "mspt": dict(in_channels=1, out_channels=1, width=8, depth=1, n_heads=2),
}
REQUIRED = {"codano": "variables", "spherical_transformer": "nlat", "planar_transformer": "nlon"}
# one integer hyperparameter of each operator, for non-positive / bool / float values
SIZE = {"galerkin_transformer": "n_layers", "mano": "width", "mano_extended": "head_width", "codano": "width", "erwin": "n_heads",
        "bsa_transformer": "depth", "spherical_transformer": "embed_dim", "planar_transformer": "n_layers"}
# erwin's n_heads is an int or one entry per level
STRING = {"erwin": (TypeError, ("n_heads: expected a positive int or 2 ints (one per level), got '4' (str)",))}
HEADS = {"galerkin_transformer": "n_heads", "mano": "n_heads", "mano_extended": "n_heads", "codano": "n_heads", "bsa_transformer": "n_heads",
         "spherical_transformer": "n_heads", "planar_transformer": "n_heads", "erwin": "n_heads"}
SIZE |= {"transolver": "slice_num", "linear_no": "key_ratio", "ono": "psi_dim"}
HEADS |= {"transolver": "n_heads", "linear_no": "n_heads", "ono": "n_heads"}
SIZE |= {"gnot": "n_inner", "factformer": "dim_head", "oformer": "latent_width", "fno": "hidden_channels"}
HEADS |= {"gnot": "n_heads", "factformer": "n_heads", "oformer": "n_heads", "fno": "n_layers"}  # fno: no heads
SIZE |= {"anie": "state_channels"}
HEADS |= {"anie": "n_heads"}
SIZE |= {"funcattn": "basis_num"}
HEADS |= {"funcattn": "n_heads"}
SIZE |= {"fastmax_transformer": "width"}
HEADS |= {"fastmax_transformer": "n_heads"}
SIZE |= {"schwarz_transformer": "mlp_ratio"}
HEADS |= {"schwarz_transformer": "n_heads"}
SIZE |= {"continuum_transformer": "dim_ff"}
HEADS |= {"continuum_transformer": "n_heads"}
SIZE |= {"continuum_vitno": "patches"}
HEADS |= {"continuum_vitno": "n_heads"}
SIZE |= {"mspt": "max_patches"}
HEADS |= {"mspt": "n_heads"}


def make(name: str, **change):
    def call():
        return create_operator(name, **{**VALID[name], **change})

    return call


def case(id: str, call, exc, words) -> Case:
    return Case("operators", id, call, exc, words)


def _per_operator(name: str) -> list[Case]:
    size = SIZE[name]
    required = REQUIRED.get(name, "in_channels")
    without = {k: v for k, v in VALID[name].items() if k != required}
    return [
        case(f"{name}-unknown-key", make(name, n_layerz=2), ValueError,
             ("config: unknown key(s) ['n_layerz']", repr(name), "expected keys from")),
        case(f"{name}-missing-required", lambda: create_operator(name, **without), ValueError,
             (f"config: missing required key(s) ['{required}']", repr(name))),
        case(f"{name}-not-json", make(name, **{size: torch.tensor(2)}), ValueError,
             ("config: expected plain JSON values",)),
        case(f"{name}-{size}-zero", make(name, **{size: 0}), ValueError, (size, "positive", "0")),
        case(f"{name}-{size}-negative", make(name, **{size: -3}), ValueError, (size, "positive", "-3")),
        case(f"{name}-{size}-bool", make(name, **{size: True}), TypeError, (size, "positive int", "bool")),
        case(f"{name}-{size}-string", make(name, **{size: "4"}), *STRING.get(name, (TypeError, (size, "int", "str")))),
        case(f"{name}-heads-zero", make(name, **{HEADS[name]: 0}), ValueError, (HEADS[name], "0")),
    ] + [
        case(f"{name}-{size}-float", make(name, **{size: 2.5}), TypeError, (size, "int", "float"))
    ]


CASES: list[Case] = [case("unknown-operator", lambda: create_operator("fno9000", in_channels=1), ValueError,
                          ("name: expected a registered operator", "got 'fno9000'"))]
CASES += [c for name in list_operators() for c in _per_operator(name)]
CASES += [
    # choices and structure
    case("galerkin_transformer-attention-type", make("galerkin_transformer", attention_type="softmax"), ValueError,
         ("attention_type: expected one of", "'softmax'")),
    case("galerkin_transformer-regressor", make("galerkin_transformer", regressor="mlp9"), ValueError,
         ("regressor", "'mlp9'")),
    case("galerkin_transformer-heads-not-divisor", make("galerkin_transformer", n_heads=3), ValueError,
         ("n_heads", "3")),
    case("mano-pool", make("mano", pool="max"), ValueError, ("pool: expected one of", "'max'")),
    case("mano-ffn", make("mano_extended", ffn="moe"), ValueError, ("ffn", "'moe'")),
    case("mano-head", make("mano_extended", head="giant"), ValueError, ("head", "'giant'")),
    case("codano-variables-not-list", make("codano", variables="au"), ValueError,
         ("variables: expected a non-empty list of variable names, got 'au'",)),
    case("codano-variables-duplicate", make("codano", variables=["a", "a"]), ValueError, ("variables", "'a'")),
    case("codano-mixer", make("codano", mixer="global"), ValueError, ("mixer", "'global'")),
    case("erwin-lengths-differ", make("erwin", ball_sizes=(4,)), ValueError, ("ball_sizes",)),
    case("erwin-ball-not-power-of-two", make("erwin", ball_sizes=(6, 6)), ValueError, ("ball_size", "6")),
    case("bsa_transformer-top-k-zero", make("bsa_transformer", top_k=0), ValueError, ("top_k", "0")),
    case("spherical_transformer-grid", make("spherical_transformer", grid="healpix"), ValueError,
         ("grid", "'healpix'")),
    case("spherical_transformer-attention", make("spherical_transformer", attention="global9"), ValueError,
         ("attention", "'global9'")),
    case("planar_transformer-pos-embed", make("planar_transformer", pos_embed="rope"), ValueError,
         ("pos_embed", "'rope'")),
    # bad inputs to forward
    case("galerkin_transformer-forward-rank", lambda: make("galerkin_transformer")()(torch.randn(2, 8, 8)), ValueError,
         ("x", "4-D")),
    case("galerkin_transformer-forward-channels", lambda: make("galerkin_transformer")()(torch.randn(2, 3, 8, 8)),
         ValueError, ("x", "1", "3")),
    case("mano-forward-rank", lambda: make("mano")()(torch.randn(2, 1, 8)), ValueError, ("x", "4-D")),
    case("mano-forward-channels", lambda: make("mano")()(torch.randn(2, 2, 8, 8)), ValueError, ("x", "1", "2")),
    case("spherical_transformer-forward-grid", lambda: make("spherical_transformer")()(torch.randn(2, 1, 4, 9)),
         ValueError, ("x", "got 4x9", "a multiple or a divisor of its internal grid's nlon = 4")),
    case("erwin-forward-pos-dims", lambda: make("erwin")()(torch.randn(2, 16, 1), torch.randn(2, 16, 2)),
         ValueError, ("pos", "3")),
    case("bsa_transformer-forward-channels", lambda: make("bsa_transformer")()(torch.randn(2, 16, 2),
                                                                               torch.randn(2, 16, 3)),
         ValueError, ("x", "1", "2")),
]


@parametrize(CASES)
def test_operator_bad_config_or_input(case: Case):
    run_case(case)
