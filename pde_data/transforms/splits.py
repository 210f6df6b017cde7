"""Train/test division of *single-split files*: files that hold one undivided set of samples.

Some files carry no train/test division: ``mini_car.pt`` (three cars), a NetCDF/Zarr store from
``sciattn data generate``, one HDF5 file of The Well, a neuraloperator ``.pt`` whose name does not
say ``_train_``/``_test_``. Handing back the whole file for ``split="train"`` *and* for
``split="test"`` would train and test on the same samples, so these readers refuse both unless a
split rule is given, and take ``split=None`` for "every sample, no division" (evaluating a file).

The rule, one convention for every reader::

    split_rule = "last:K"     test = the last K units in file order, train = the units before them
    split_rule = "first:K"    test = the first K units, train = the units after them
    split_rule = "last:P%"    (or "first:P%") K = floor(P/100 · n), P in (0, 100)

where a unit is a sample (a car, a grid pair) or, for time series, a whole trajectory, so windows of
one trajectory never land on both sides. ``1 <= K <= n - 1`` is required: both splits are non-empty,
disjoint, and together hold every unit. "Last" follows the FNO files' convention (train head, test
tail); ``first`` is there for files ordered the other way. :func:`split_indices` is the one helper
the readers call; ``sciattn.train``'s ``[data] split_rule = "test_last"`` with ``n_test = K`` is
``split_rule = "last:K"`` here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Dataset

__all__ = ["SPLIT_RULE_FORMAT", "SplitRule", "SplitSubset", "parse_split_rule", "split_indices", "describe_split"]

SPLIT_RULE_FORMAT = "'last:K' (test = the last K samples in file order), 'first:K', 'last:P%' or 'first:P%'"
_RULE_RE = re.compile(r"^(?P<end>last|first):(?:(?P<k>[1-9][0-9]*)|(?P<p>[0-9]+(?:\.[0-9]+)?)%)$")
_SPLITS = ("train", "test")


@dataclass(frozen=True)
class SplitRule:
    """``last:K`` / ``first:K`` (``count``) or ``last:P%`` / ``first:P%`` (``percent``): the test
    split is the file's tail (``last``) or head (``first``)."""

    text: str
    last: bool = True
    count: int | None = None
    percent: float | None = None

    def n_test(self, n: int, what: str = "the file") -> int:
        """Test units out of ``n``; raises ``ValueError`` naming ``split_rule`` unless ``1 <= K <= n - 1``."""
        k = self.count if self.count is not None else math.floor(self.percent * n / 100 + 1e-9)
        if not 1 <= k <= n - 1:
            raise ValueError(f"split_rule: expected 1 <= K <= {n - 1} test units so that both splits of the {n} "
                             f"units of {what} are non-empty, got {self.text!r} (K = {k})")
        return k


def parse_split_rule(rule: str | SplitRule) -> SplitRule:
    """Parse ``"last:K"`` / ``"last:P%"``; raises ``ValueError`` naming ``split_rule`` otherwise."""
    if isinstance(rule, SplitRule):
        return rule
    if not isinstance(rule, str) or not (m := _RULE_RE.match(rule.strip())):
        raise ValueError(f"split_rule: expected {SPLIT_RULE_FORMAT}, got {rule!r}")
    last = m["end"] == "last"
    if m["k"] is not None:
        return SplitRule(rule.strip(), last, count=int(m["k"]))
    p = float(m["p"])
    if not 0 < p < 100:
        raise ValueError(f"split_rule: expected a percentage in (0, 100), got {rule!r}")
    return SplitRule(rule.strip(), last, percent=p)


def _plural(unit: str) -> str:
    return unit[:-1] + "ies" if unit.endswith("y") else unit + "s"


def split_indices(
    n: int, split: str | None, split_rule: str | SplitRule | None, *, what: str, unit: str = "sample"
) -> range:
    """The units of a single-split file that ``split`` takes under ``split_rule``.

    ``split=None`` (no rule): every unit, ``range(n)``. ``split="train"``/``"test"`` need a rule:
    ``last:K`` gives ``range(0, n - K)`` / ``range(n - K, n)``, ``first:K`` ``range(K, n)`` /
    ``range(0, K)``. ``what`` names the file in errors.

    Raises ``ValueError`` naming ``split`` for a train/test request without a rule (the file has no
    division) or for a rule without a split, and naming ``split_rule`` for a malformed rule or a K
    that leaves a split empty.
    """
    if split is not None and split not in _SPLITS:
        raise ValueError(f"split: expected one of {list(_SPLITS)} or None, got {split!r}")
    if split_rule is None:
        if split is None:
            return range(n)
        raise ValueError(
            f"split: {what} holds one set of {n} {_plural(unit)} with no train/test division, so split={split!r} would "
            f"mean every {unit} for train and test alike; expected split=None (every {unit}) or a split_rule "
            f"such as 'last:1' ({SPLIT_RULE_FORMAT})"
        )
    rule = parse_split_rule(split_rule)
    if split is None:
        raise ValueError(f"split: expected 'train' or 'test' with split_rule={rule.text!r}, got None")
    k = rule.n_test(n, what)
    cut = n - k if rule.last else k
    head = (split == "train") == rule.last
    return range(0, cut) if head else range(cut, n)


def describe_split(split_rule: str | SplitRule | None, unit: str = "sample") -> str:
    """Words for ``meta["split_convention"]``."""
    if split_rule is None:
        return f"single-split file: every {unit}, no train/test division"
    rule = parse_split_rule(split_rule)
    end, amount = rule.text.split(":", 1)
    return f"split_rule {rule.text!r}: test = the {end} {amount} {_plural(unit)} in file order, train = the rest"


class SplitSubset(Dataset):
    """Items ``indices`` of ``base`` with their own ``meta``; other attributes are ``base``'s (e.g. a
    reader's ``in_channels``, ``resolution``, ``variables``)."""

    def __init__(self, base: Dataset, indices: Sequence[int], meta: dict[str, Any]) -> None:
        self.base, self.indices, self.meta = base, list(indices), dict(meta)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        n = len(self.indices)
        if not -n <= i < n:
            raise IndexError(f"index: expected an int in [-{n}, {n}), got {i}")
        return self.base[self.indices[i]]

    def __getattr__(self, name: str):
        if name in ("base", "indices", "meta") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.base, name)

    def __repr__(self) -> str:
        return f"SplitSubset({self.base!r}, {len(self)} of {len(self.base)} items, split={self.meta.get('split')!r})"
