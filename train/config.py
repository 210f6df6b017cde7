"""Typed run configuration loaded from TOML, with ``--set section.key=value`` overrides.

A config has three sections::

    [model]            name = "<registered operator>", every other key is a constructor argument
    [data]             see :class:`DataConfig`
    [train]            see :class:`TrainConfig`

Unknown sections or keys are errors that name the key (model keys are checked against the
operator's constructor by :func:`sciattn.operators.create_operator`). Values are parsed as TOML
literals, never evaluated as Python.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciattn.operators.registry import operator_parameters

__all__ = ["DataConfig", "TrainConfig", "RunConfig", "load_config", "parse_overrides", "ConfigError", "validate_train",
           "validate_data", "DATA_FORMATS", "SPLIT_RULES"]


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the key."""


@dataclass
class DataConfig:
    """Where the data comes from (see :mod:`.data`; every value is checked by :func:`validate_data`).

    ``train``: a :func:`sciattn.pde_data.load` name or a path. A built-in generator (``darcy``,
    ``burgers``, ``navier_stokes``, ``shallow_water``, ``coupled_navier_stokes``) generates the data
    (cached under ``cache_dir``, default ``<root>/generated``); another registered name reads its
    files under ``root`` (default ``$SCIATTN_DATA`` or ``~/.cache/sciattn/data``); a path is read by
    the reader its content names (FNO ``.mat``, PDEBench or The Well HDF5, neuraloperator ``.pt``,
    ``mini_car.pt``, NetCDF/Zarr).
    ``test``: optional second source read with ``split="test"``; empty: the same source's test split,
    or for a file without a split of its own a disjoint part of it chosen by ``split_rule``
    (``"test_last"``: the last ``n_test`` samples, ``"test_first"``: the first; ``"reader"``: the
    reader's own split; ``"auto"``: the reader's own split when it has one, else ``"test_last"``).
    ``resolution``: points per axis of the training data (the reader's own subsampling);
    ``test_resolutions``: resolutions of the test sets (default: ``resolution``).
    ``n_train``, ``n_test``: sample counts (default: the reader's, or all / a fifth of a file).
    ``options``: the reader's or generator's keyword options (``t_in``, ``t_out``, ``variables``,
    ``inputs``, ``channels``, solver parameters, ...), checked against its signature.
    ``as_points``: train on point samples ``(N, C)`` with ``pos`` and ``weights`` (grid nodes or mesh
    nodes flattened), as point-set operators need.
    ``format``: ``"auto"``; the older ``"neuralop_pt"`` (``train``/``test`` are ``.pt`` files) and
    ``"darcy_solver"`` (= ``train = "darcy"``; ``train_resolution`` = ``resolution``) still work.
    """

    train: str = ""
    test: str = ""
    format: str = "auto"
    resolution: int | None = None
    test_resolutions: list[int] | None = None
    n_train: int | None = None
    n_test: int | None = None
    split_rule: str = "auto"
    options: dict[str, Any] = field(default_factory=dict)
    root: str = ""
    cache_dir: str = ""
    seed: int = 0
    as_points: bool = False
    normalize_x: bool = True
    normalize_y: bool = True
    train_resolution: int | None = None

    @property
    def source(self) -> str:
        """The training source with the legacy ``format = "darcy_solver"`` resolved."""
        return "darcy" if self.format == "darcy_solver" else self.train

    @property
    def train_res(self) -> int | None:
        """``resolution`` (or its older name ``train_resolution``)."""
        return self.resolution if self.resolution is not None else self.train_resolution


@dataclass
class TrainConfig:
    """Optimisation recipe (AdamW; OneCycle or cosine schedule stepped per optimiser step).

    ``batch_size`` is the global batch of one optimiser step: under ``torchrun`` each of ``W``
    ranks takes ``batch_size / W`` samples, and ``grad_accum_steps = k`` splits those into ``k``
    micro-batches whose gradients are accumulated (so ``batch_size`` must be a multiple of
    ``W · k``). ``grad_clip``: max global gradient norm (``0``: off). ``precision``: ``"fp32"``,
    ``"bf16"`` autocast, or ``"fp16"`` autocast with loss scaling (CUDA only).
    ``checkpoint_every_steps``: also checkpoint every that many optimiser steps (``0``: only at
    epoch ends); a resumed run skips the batches already done in the current epoch.
    ``tensorboard``: TensorBoard logs (off by default; needs the ``tensorboard`` extra); ``wandb``: log to Weights &
    Biases (project ``wandb_project``) when installed.
    ``domain_parallel``: under ``torchrun``, the number of ranks that split the points of each sample
    (one mesh across processes; point-set data and an operator that supports it: Transolver,
    LinearNO, GNOT, ONO, Erwin (multiscale mode) and BSA (point counts with a window)); the ``W`` ranks form a ``(W / domain_parallel) × domain_parallel`` mesh of
    data × domain parallelism (``1``: data parallel only).
    Time series (data whose samples hold ``t_in`` input frames and later frames as targets):
    the model predicts ``frames_per_step`` frames per application; ``rollout_steps = k`` trains on
    the loss of ``k`` autoregressive applications (``1``: one step with the true inputs).
    """

    epochs: int = 15
    batch_size: int = 8
    lr: float = 3e-3
    weight_decay: float = 1e-4
    scheduler: str = "onecycle"
    pct_start: float = 0.3
    loss: str = "l2"
    h1_weight: float = 0.0
    grad_clip: float | None = 1.0
    grad_accum_steps: int = 1
    precision: str = "fp32"
    checkpoint_every_steps: int = 0
    seed: int = 0
    device: str = "cpu"
    threads: int | None = None
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "sciattn"
    rollout_steps: int = 1
    frames_per_step: int = 1
    domain_parallel: int = 1


@dataclass
class RunConfig:
    model: dict[str, Any]
    data: DataConfig
    train: TrainConfig

    @property
    def model_name(self) -> str:
        return self.model["name"]

    @property
    def model_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.model.items() if k != "name"}

    def to_dict(self) -> dict[str, Any]:
        return {"model": dict(self.model), "data": dataclasses.asdict(self.data), "train": dataclasses.asdict(self.train)}


def _table(name: str, values: Any) -> dict[str, Any]:
    """A section's value must be a table (TOML section); ``ConfigError`` naming ``[name]`` otherwise."""
    if not isinstance(values, dict):
        raise ConfigError(f"[{name}]: expected a table (TOML section), got {_kind(values)}")
    return values


def _section(cls, name: str, values: dict[str, Any]):
    values = _table(name, values)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"[{name}]: unknown key(s) {unknown}; expected keys from {sorted(known)}")
    return cls(**values)


def _kind(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _int(key: str, value: Any, minimum: int, section: str = "train") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{section}.{key}: expected an integer >= {minimum}, got {_kind(value)}")


def _number(key: str, value: Any, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
        value <= 0 if positive else value < 0
    ):
        raise ConfigError(f"train.{key}: expected a finite number {'> 0' if positive else '>= 0'}, got {_kind(value)}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"train.{key}: expected one of {list(choices)}, got {_kind(value)}")


def validate_train(t: TrainConfig) -> TrainConfig:
    """Check the type and range of every ``[train]`` value; errors name ``train.<key>``."""
    from .training.losses import LOSSES
    from .training.precision import PRECISIONS

    _int("epochs", t.epochs, 1)
    _int("batch_size", t.batch_size, 1)
    _int("grad_accum_steps", t.grad_accum_steps, 1)
    _int("checkpoint_every_steps", t.checkpoint_every_steps, 0)
    _int("seed", t.seed, 0)
    _int("rollout_steps", t.rollout_steps, 1)
    _int("frames_per_step", t.frames_per_step, 1)
    _int("domain_parallel", t.domain_parallel, 1)
    if t.threads is not None:
        _int("threads", t.threads, 1)
    _number("lr", t.lr, positive=True)
    _number("weight_decay", t.weight_decay, positive=False)
    _number("pct_start", t.pct_start, positive=True)
    if t.pct_start >= 1:
        raise ConfigError(f"train.pct_start: expected a fraction in (0, 1), got {_kind(t.pct_start)}")
    _number("h1_weight", t.h1_weight, positive=False)
    if t.grad_clip is not None:
        _number("grad_clip", t.grad_clip, positive=False)
    _choice("scheduler", t.scheduler, ("onecycle", "cosine"))
    _choice("loss", t.loss, LOSSES)
    _choice("precision", t.precision, PRECISIONS)
    for key in ("tensorboard", "wandb"):
        if not isinstance(getattr(t, key), bool):
            raise ConfigError(f"train.{key}: expected true or false, got {_kind(getattr(t, key))}")
    for key in ("device", "wandb_project"):
        if not isinstance(getattr(t, key), str) or not getattr(t, key):
            raise ConfigError(f"train.{key}: expected a non-empty string, got {_kind(getattr(t, key))}")
    if t.batch_size % t.grad_accum_steps:
        raise ConfigError(f"train.batch_size: expected a multiple of train.grad_accum_steps = {t.grad_accum_steps} "
                          f"(the batch is split into that many micro-batches), got {t.batch_size}")
    return t


DATA_FORMATS = ("auto", "neuralop_pt", "darcy_solver")
SPLIT_RULES = ("auto", "reader", "test_last", "test_first")


def _plain(key: str, value: Any) -> None:
    """An option value must be plain TOML data (no tables of tables beyond lists)."""
    if isinstance(value, list):
        for v in value:
            _plain(key, v)
    elif isinstance(value, dict) or not isinstance(value, (str, int, float, bool)):
        raise ConfigError(f"{key}: expected a number, string, boolean or a list of them, got {_kind(value)}")


def validate_data(d: DataConfig) -> DataConfig:
    """Check the type and range of every ``[data]`` value and the reader's options; errors name ``data.<key>``.

    A source that names an existing file is opened (headers only) to find its reader, so unknown
    options are reported here; a path that does not exist yet is checked when the data is built.
    """
    from .datasets.sources import GENERATORS, RESERVED_OPTIONS, option_names, resolve_source

    for key in ("train", "test", "root", "cache_dir"):
        if not isinstance(getattr(d, key), str):
            raise ConfigError(f"data.{key}: expected a string, got {_kind(getattr(d, key))}")
    if d.format not in DATA_FORMATS:
        raise ConfigError(f"data.format: expected one of {list(DATA_FORMATS)}, got {_kind(d.format)}")
    if d.format == "darcy_solver" and d.train not in ("", "darcy"):
        raise ConfigError(f"data.train: format = 'darcy_solver' generates Darcy data; expected no data.train, got "
                          f"{_kind(d.train)} (drop data.format to read that source)")
    if d.format == "neuralop_pt" and not (d.train and d.test):
        raise ConfigError(f"data.train / data.test: format = 'neuralop_pt' expects paths of two .pt files, got "
                          f"{_kind(d.train)} and {_kind(d.test)}")
    if not d.source:
        raise ConfigError("data.train: expected a load() name (e.g. 'darcy') or the path of a data file, got ''")
    for key in ("resolution", "train_resolution", "n_train", "n_test"):
        if getattr(d, key) is not None:
            _int(key, getattr(d, key), 1, "data")
    _int("seed", d.seed, 0, "data")
    if d.resolution is not None and d.train_resolution is not None and d.resolution != d.train_resolution:
        raise ConfigError(f"data.train_resolution: the older name of data.resolution; expected one of them, got "
                          f"resolution = {d.resolution} and train_resolution = {d.train_resolution}")
    if d.test_resolutions is not None:
        if not isinstance(d.test_resolutions, list) or not d.test_resolutions:
            raise ConfigError(f"data.test_resolutions: expected a non-empty list of integers >= 1, got "
                              f"{_kind(d.test_resolutions)}")
        for r in d.test_resolutions:
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise ConfigError(f"data.test_resolutions: expected a non-empty list of integers >= 1, got "
                                  f"{_kind(d.test_resolutions)}")
    if d.split_rule not in SPLIT_RULES:
        raise ConfigError(f"data.split_rule: expected one of {list(SPLIT_RULES)}, got {_kind(d.split_rule)}")
    for key in ("as_points", "normalize_x", "normalize_y"):
        if not isinstance(getattr(d, key), bool):
            raise ConfigError(f"data.{key}: expected true or false, got {_kind(getattr(d, key))}")
    if not isinstance(d.options, dict):
        raise ConfigError(f"data.options: expected a table of keyword options, e.g. {{ t_in = 10 }}, got "
                          f"{_kind(d.options)}")
    for key, value in d.options.items():
        if key in RESERVED_OPTIONS:
            raise ConfigError(f"data.options.{key}: set by {RESERVED_OPTIONS[key]}, not as an option")
        _plain(f"data.options.{key}", value)
    sources = [("train", d.source)] + ([("test", d.test)] if d.test else [])
    for key, spec in sources:
        try:
            src = resolve_source(spec, fmt=d.format)
        except (ValueError, OSError) as err:
            raise ConfigError(f"data.{key}: {err}") from None
        if src.kind == "file" and src.reader is None and "/" not in spec and "." not in spec:
            from sciattn.pde_data.registry import BENCHMARKS

            raise ConfigError(f"data.{key}: expected a generator ({sorted(GENERATORS)}), a registered benchmark "
                              f"({sorted(set(BENCHMARKS) - set(GENERATORS))}) or the path of a data file, got "
                              f"{spec!r}")
        if key == "test" and src.kind == "generated":
            raise ConfigError(f"data.test: a generator ({spec!r}) makes its own test split; expected a file or a "
                              f"benchmark name, or leave data.test empty")
        allowed = option_names(src)
        if allowed is None:
            continue
        unknown = sorted(set(d.options) - allowed)
        if unknown:
            what = (f"generator {src.name!r}" if src.kind == "generated" else f"benchmark {src.name!r}"
                    if src.kind == "benchmark" else f"reader {src.reader!r} of {spec!r}")
            raise ConfigError(f"data.options: unknown option(s) {unknown} for {what}; expected options from "
                              f"{sorted(allowed)}")
    if d.source in GENERATORS and d.split_rule not in ("auto", "reader"):
        raise ConfigError(f"data.split_rule: a generator splits its samples itself (train first, then test); "
                          f"expected 'auto', got {_kind(d.split_rule)}")
    return d


def _check_model(model: dict[str, Any]) -> None:
    _table("model", model)
    if "name" not in model:
        raise ConfigError("[model]: missing key 'name' (a registered operator)")
    try:
        params = operator_parameters(model["name"])
    except ValueError as err:
        raise ConfigError(f"model.name: {err}") from None
    unknown = sorted(set(model) - {"name"} - set(params))
    if unknown:
        raise ConfigError(
            f"[model]: unknown key(s) {unknown} for operator {model['name']!r}; expected keys from {sorted(params)}"
        )


def from_dict(raw: dict[str, Any]) -> RunConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a table of sections [model], [data] and [train], got {_kind(raw)}")
    unknown = sorted(set(raw) - {"model", "data", "train"})
    if unknown:
        raise ConfigError(f"config: unknown section(s) {unknown}; expected [model], [data] and [train]")
    model = dict(_table("model", raw.get("model", {})))
    _check_model(model)
    return RunConfig(model, validate_data(_section(DataConfig, "data", raw.get("data", {}))),
                     validate_train(_section(TrainConfig, "train", raw.get("train", {}))))


#: words users write for "no value", which TOML does not have (``--unset`` removes a key instead)
_NULL_WORDS = ("null", "None")


def _literal(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word is a string


def parse_overrides(pairs: list[str]) -> list[tuple[str, str, Any]]:
    """Parse ``section.key=value`` strings; values are TOML literals (bare words are strings)."""
    out = []
    for pair in pairs:
        if "=" not in pair or "." not in pair.split("=", 1)[0]:
            raise ConfigError(f"--set: expected section.key=value, got {pair!r}")
        path, text = pair.split("=", 1)
        section, key = path.strip().split(".", 1)
        if text.strip() in _NULL_WORDS:
            raise ConfigError(f"--set {path.strip()}={text.strip()}: TOML has no null value; to drop the key and take "
                              f"its default, use --unset {path.strip()}")
        out.append((section, key, _literal(text.strip())))
    return out


def _unset(raw: dict[str, Any], path: str) -> None:
    """Remove ``section.key`` (``data.options.t_in``: a key of an inline table) from ``raw``, so that the key
    takes its default; a key the config does not hold is an error (a typo would otherwise pass unnoticed)."""
    if "." not in path:
        raise ConfigError(f"--unset: expected section.key, got {path!r}")
    section, key = path.split(".", 1)
    if section not in ("model", "data", "train"):
        raise ConfigError(f"--unset {path}: unknown section {section!r}; expected model, data or train")
    target = raw.get(section)
    *parents, leaf = key.split(".")
    for part in parents:
        target = target.get(part) if isinstance(target, dict) else None
    if not isinstance(target, dict) or leaf not in target:
        raise ConfigError(f"--unset {path}: expected a key the config sets, got one it does not hold")
    del target[leaf]


def apply_overrides(raw: dict[str, Any], pairs: list[str], unset: list[str] | None = None) -> dict[str, Any]:
    """``raw`` with the ``--unset`` keys removed (they take their defaults), then the ``--set`` pairs applied;
    ``raw`` itself is not modified."""
    raw = copy.deepcopy(raw)  # wrong types: reported by from_dict
    for path in unset or []:
        _unset(raw, path.strip())
    for section, key, value in parse_overrides(pairs):
        if section not in ("model", "data", "train"):
            raise ConfigError(f"--set {section}.{key}: unknown section {section!r}; expected model, data or train")
        target = raw.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"--set {section}.{key}: [{section}]: expected a table (TOML section), got {_kind(target)}")
        *parents, leaf = key.split(".")
        for part in parents:  # data.options.t_in=5 sets a key of the inline table [data] options
            if not isinstance(target.get(part, {}), dict):
                raise ConfigError(f"--set {section}.{key}: {section}.{part} is not a table, got {_kind(target[part])}")
            target[part] = dict(target.get(part, {}))
            target = target[part]
        target[leaf] = value
    return raw


def load_config(source: str | Path | dict[str, Any], overrides: list[str] | None = None,
                unset: list[str] | None = None) -> RunConfig:
    """Load a TOML file (or an already parsed dict), remove the ``unset`` keys, apply the overrides and validate
    every key."""
    if isinstance(source, dict):
        raw = source
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"config: expected an existing TOML file, got {str(path)!r}")
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"config: {str(path)!r} is not valid TOML: {err}") from None
    return from_dict(apply_overrides(raw, overrides or [], unset))
