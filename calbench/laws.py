"""What a family is made of: parameters and their domains, grids, the ``Family`` row type,
validated ``Target``s (the only way to get a law) and a quantile function safe for every law.

``calbench.families`` holds the table of the 30 evaluation families and
``calbench.extra_families`` the training-only ones; both are rows of ``Family``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np

Kind = Literal["int", "cont"]
Split = Literal["train", "unseen", "heldout"]
Domain = Literal["real", "positive", "prob", "open_prob", "count", "posint"]

SIGNIFICANT_DIGITS = 4


class InvalidParametersError(ValueError):
    """Parameters that do not define a valid law of the named family."""


@dataclass(frozen=True)
class Param:
    """One parameter of a family: its name in the prompt and its domain."""

    name: str
    domain: Domain = "real"

    def check(self, family: str, value: float) -> None:
        """Raise ``InvalidParametersError`` naming the family and parameter if ``value`` is outside the domain."""
        where = f"{family}: parameter '{self.name}'"
        if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool):
            raise InvalidParametersError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise InvalidParametersError(f"{where} must be finite, got {value!r}")
        integral = float(value).is_integer()
        problems = {
            "positive": (value <= 0, "must be > 0"),
            "prob": (not 0 <= value <= 1, "must be in [0, 1]"),
            "open_prob": (not 0 < value <= 1, "must be in (0, 1]"),
            "count": (not (integral and value >= 0), "must be an integer >= 0"),
            "posint": (not (integral and value >= 1), "must be an integer >= 1"),
        }
        bad, message = problems.get(self.domain, (False, ""))
        if bad:
            raise InvalidParametersError(f"{where} {message}, got {value!r}")

    @property
    def integer(self) -> bool:
        return self.domain in ("count", "posint")


def lin(a: float, b: float, n: int) -> tuple[float, ...]:
    """``numpy.linspace`` grid axis (the tables' "lin[a,b] nK")."""
    return tuple(np.linspace(a, b, n).tolist())


def geom(a: float, b: float, n: int) -> tuple[float, ...]:
    """``numpy.geomspace`` grid axis (the tables' "geom[a,b] nK")."""
    return tuple(np.geomspace(a, b, n).tolist())


@dataclass(frozen=True)
class Grid:
    """A Cartesian product of named axes, mapped onto the family's parameters.

    ``derive`` turns one combination of axis values into parameter values; by default
    the axes are the parameters themselves. Uniform, for example, is gridded over
    ``a`` and a width, and ``derive`` returns ``{"a": a, "b": a + width}``.
    """

    axes: tuple[tuple[str, Sequence[float]], ...]
    derive: Callable[..., dict[str, float]] | None = None

    def combinations(self) -> Iterator[dict[str, float]]:
        names = [name for name, _ in self.axes]
        for values in itertools.product(*(axis for _, axis in self.axes)):
            combo = {n: float(v) for n, v in zip(names, values, strict=True)}
            yield self.derive(**combo) if self.derive else combo

    def __len__(self) -> int:
        return math.prod(len(axis) for _, axis in self.axes)


def grid(**axes: Sequence[float]) -> Grid:
    """A grid whose axes are the parameters themselves, in the order given."""
    return Grid(tuple(axes.items()))


@dataclass(frozen=True, eq=False)  # rows are singletons: identity is equality
class Family:
    """One row of the families table."""

    name: str
    display: str
    kind: Kind
    tier: int
    params: tuple[Param, ...]
    scipy: Callable[..., Any]
    grids: Mapping[Split, Grid]
    selected: tuple[Mapping[str, float], ...]
    check: Callable[..., str | None] | None = None  # cross-parameter constraint

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def heldout(self) -> bool:
        return "heldout" in self.grids

    @property
    def eval_split(self) -> Split:
        """The split this family's evaluation prompts belong to."""
        return "heldout" if self.heldout else "unseen"

    @property
    def article(self) -> str:
        # By sound, not spelling: "an Exponential", "an F", but "a Uniform" ("yoo").
        return "an" if self.display[0] in "AEIO" or self.display == "F" else "a"

    def target(self, params: Mapping[str, float]) -> Target:
        return Target(self, tuple(params.items()))

    def points(self, split: Split) -> list[Target]:
        """Every grid point of ``split``, rounded to 4 significant digits, in grid order."""
        if split not in self.grids:
            return []
        return [self.target(round_params(self, combo)) for combo in self.grids[split].combinations()]

    def selected_points(self) -> list[Target]:
        return [self.target(p) for p in self.selected]


def round_sig(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """Round to ``digits`` significant digits (0.5743491774985174 -> 0.5743)."""
    return float(f"{value:.{digits}g}")


def format_value(value: float) -> str:
    """A parameter as the prompt prints it: integers without ".0", no exponent, no float noise."""
    if float(value).is_integer():
        return str(int(value))
    return np.format_float_positional(float(value), unique=True, trim="-")


def round_params(family: Family, values: Mapping[str, float]) -> dict[str, float]:
    """Prompt values: 4 significant digits; integer parameters as ints. The law is built from these."""
    out: dict[str, float] = {}
    for p in family.params:
        v = round_sig(values[p.name])
        out[p.name] = round(v) if p.integer else v
    return out


def _normalise(family: Family, params: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    missing = [n for n in family.param_names if n not in params]
    extra = [n for n in params if n not in family.param_names]
    if missing or extra:
        raise InvalidParametersError(
            f"{family.name}: expected parameters {', '.join(family.param_names)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    for p in family.params:
        p.check(family.name, params[p.name])
    values = {p.name: (int(params[p.name]) if p.integer else float(params[p.name])) for p in family.params}
    if family.check is not None and (problem := family.check(**values)):
        raise InvalidParametersError(f"{family.name}: {problem}")
    return tuple(values.items())


@dataclass(frozen=True)
class Target:
    """A family with validated parameter values: the law a prompt asks the model to sample."""

    family: Family
    items: tuple[tuple[str, float], ...] = field()

    def __post_init__(self) -> None:
        # Built directly or through make_target, a target's parameters are checked the same way.
        object.__setattr__(self, "items", _normalise(self.family, dict(self.items)))

    @property
    def params(self) -> dict[str, float]:
        return dict(self.items)

    @cached_property
    def law(self) -> Any:
        """The frozen ``scipy.stats`` distribution (built once, kept); parameters too extreme for
        floating point (lognormal mu=800: e^mu overflows) raise ``InvalidParametersError`` naming them."""
        return self.fresh_law()

    def fresh_law(self) -> Any:
        """``law`` built anew and not kept (about 10 KB each: a training run's tens of thousands of
        drawn targets are checked without keeping their laws)."""
        try:
            return self.family.scipy(**self.params)
        except (OverflowError, ZeroDivisionError, ValueError) as err:
            raise InvalidParametersError(
                f"{self.key}: these parameters are too extreme to build the law in floating point ({err})"
            ) from None

    @property
    def integer(self) -> bool:
        return self.family.kind == "int"

    @property
    def key(self) -> str:
        """A stable identifier, e.g. ``gaussian(mu=3.5,sigma=3)``."""
        inner = ",".join(f"{k}={format_value(v)}" for k, v in self.items)
        return f"{self.family.name}({inner})"

    def support(self) -> tuple[float, float]:
        """The law's support (lo, hi): asked for every answer scored, so computed once."""
        return self._support

    @cached_property
    def _support(self) -> tuple[float, float]:
        lo, hi = self.law.support()
        return float(lo), float(hi)


def ppf(law: Any, q: float | Sequence[float] | np.ndarray) -> np.ndarray:
    """The law's quantile function F^{-1}(q) = min{x : F(x) >= q}, safe for every family.

    For 0 < q < 1 the result lies in the support (scipy's geometric p=1 lands below it).
    scipy's discrete ``ppf`` can give up (skellam(8.5, 12).ppf(0.1008) raises "updating
    stopped, endless loop"); integer laws then fall back to a search over the CDF on
    mean ± 50 standard deviations, clipped to the support.
    """
    q = np.asarray(q, dtype=float)
    lo, hi = law.support()
    tabled = _ppf_on_a_table(law, q, lo, hi)
    if tabled is not None:
        return tabled
    try:
        # A degenerate law (geometric p=1) divides by log(0) in scipy's formula and lands
        # below the support: the quantile is the support's first point.
        with np.errstate(divide="ignore"):
            raw = np.asarray(law.ppf(q), dtype=float)
        return np.where((q > 0) & (q < 1), np.clip(raw, lo, hi), raw)
    except RuntimeError:
        if not hasattr(law.dist, "pmf"):
            raise
    mean, sd = float(law.mean()), float(law.std())
    if not (math.isfinite(mean) and math.isfinite(sd)):  # no finite window to search (a heavy tail)
        raise ValueError(f"{law.dist.name}: scipy's quantile gave up and the law has no finite mean and spread")
    ks = np.arange(max(lo, math.floor(mean - 50 * sd)), min(hi, math.ceil(mean + 50 * sd)) + 1)
    cdf = law.cdf(ks)
    return ks[np.minimum(np.searchsorted(cdf, q, side="left"), ks.size - 1)].astype(float)


# Integer laws whose ppf is a search, and gives integers: scipy's generic bisection (beta-binomial
# and hypergeometric of the 30; the rest for training-only extra families) and calbench's own
# (calbench.law_transforms). Skellam's is left to scipy, whose answers there are not always
# integers (skellam(0.3604, 41.74).ppf(0.17185) is -47.185), and the frozen prompt sets were
# chosen with them.
_TABLED_PPF = frozenset(
    {"betabinom", "hypergeom", "betanbinom", "nhypergeom", "logser", "zipfian", "yulesimon"}
    | {"discrete_mixture", "discrete_truncated", "rounded"}
)


def _ppf_on_a_table(law: Any, q: np.ndarray, lo: float, hi: float) -> np.ndarray | None:
    """scipy's answer for many q in (0, 1) of an integer law whose ``ppf`` is scipy's generic
    bisection (beta-binomial, hypergeometric: 0.1-1 ms per q), found at once: the CDF on
    the integers between scipy's quantiles of the smallest and the largest q, then the first
    integer whose CDF reaches each q, which is what the bisection finds where the CDF rises
    monotonically there (checked; None where it does not, or where the table would be large)."""
    if q.size < 8 or getattr(getattr(law, "dist", None), "name", None) not in _TABLED_PPF:
        return None
    if not np.all((q > 0) & (q < 1)):
        return None
    try:
        first, last = (float(v) for v in law.ppf([q.min(), q.max()]))
    except RuntimeError:  # scipy gave up (see ppf): its fallback serves
        return None
    if not (math.isfinite(first) and math.isfinite(last)) or last - first > 100_000:
        return None
    ks = np.arange(first, last + 1)
    cdf = np.asarray(law.cdf(ks), dtype=float)
    if np.any(np.diff(cdf) < 0):
        return None
    at = np.searchsorted(cdf, q, side="left")
    if at.max() >= ks.size:
        return None
    return np.clip(ks[at], lo, hi)
