"""Laws made from other laws, as scipy distributions: two-component mixtures, truncations and
roundings to the nearest integer (the training-only families of ``calbench.extra_families``).

Each is a ``scipy.stats`` generator without shape parameters, used as it is (it is its own
frozen law: ``law.dist`` is the law, as a frozen scipy law's names its generator), with every
method calbench calls: ``cdf``, ``sf``, ``ppf``, ``pdf``/``pmf``, ``rvs``, ``median`` and
``stats`` (mean and variance in closed form from the parts: NaN where a part has none, as for
a Cauchy). Quantiles are exact to floating point: a mixture's by bisection between its parts'
quantiles (the mixture's lies between them), a truncation's through its base's quantile (the
upper half through the survival function, for precision), a rounding's as the smallest integer
whose cumulative mass reaches q.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from calbench.laws import ppf

BISECTIONS = 200  # halvings at most: the bracket's width reaches its floating-point resolution well before


def _bisect(cdf: Any, q: np.ndarray, lo: np.ndarray, hi: np.ndarray, integer: bool) -> np.ndarray:
    """The smallest x in [lo, hi] with cdf(x) >= q, elementwise (cdf(hi) >= q is assumed)."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    if integer:
        lo, hi = np.floor(lo) - 1, np.ceil(hi)  # cdf(lo) < q unless q is reached below: checked at the end
    for _ in range(BISECTIONS):
        open_ = (hi - lo > 1) if integer else (hi - lo > 4 * np.spacing(np.maximum(np.abs(lo), np.abs(hi))))
        if not open_.any():
            break
        mid = np.floor((lo + hi) / 2) if integer else (lo + hi) / 2
        below = cdf(mid) < q
        lo = np.where(open_ & below, mid, lo)
        hi = np.where(open_ & ~below, mid, hi)
    return hi


class _TwoParts:
    """What both mixtures share: ``w`` parts of ``first`` and ``1 - w`` of ``second``, their CDF,
    survival function, draws and moments."""

    parts: tuple[Any, Any]
    w: float

    def _parts(self, first: Any, second: Any, w: float) -> dict[str, float]:
        """Keep the parts; the support's ends, for scipy's constructor."""
        self.parts, self.w = (first, second), float(w)
        lo = min(float(p.support()[0]) for p in self.parts)
        hi = max(float(p.support()[1]) for p in self.parts)
        return {"a": lo, "b": hi}

    def _mix(self, method: str, x: Any) -> Any:
        first, second = (getattr(p, method)(x) for p in self.parts)
        return self.w * first + (1 - self.w) * second

    def _cdf(self, x: Any) -> Any:
        return self._mix("cdf", x)

    def _sf(self, x: Any) -> Any:
        return self._mix("sf", x)

    def _bracket(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The parts' quantiles at q: the mixture's lies between them."""
        bounds = np.stack([ppf(p, q) for p in self.parts])
        return bounds.min(axis=0), bounds.max(axis=0)

    def _rvs(self, size: Any = None, random_state: Any = None) -> Any:
        pick = random_state.random(size) < self.w
        first, second = (p.rvs(size=size, random_state=random_state) for p in self.parts)
        return np.where(pick, first, second)

    def _stats(self) -> tuple[float, float, None, None]:
        return _mixture_stats(self.parts, self.w)


class Mixture(_TwoParts, stats.rv_continuous):
    """A two-part mixture of frozen continuous laws."""

    def __init__(self, first: Any, second: Any, w: float) -> None:
        super().__init__(**self._parts(first, second, w), name="mixture")

    def _pdf(self, x: Any) -> Any:
        return self._mix("pdf", x)

    def _ppf(self, q: Any) -> Any:
        q = np.asarray(q, dtype=float)
        return _newton(self._cdf, self._pdf, q, *self._bracket(q))


def _newton(cdf: Any, pdf: Any, q: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The x in [lo, hi] with cdf(x) = q (continuous, increasing cdf; cdf(lo) <= q <= cdf(hi)):
    Newton's steps kept inside a shrinking bracket, a bisection where a step would leave it."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    x = (lo + hi) / 2
    for _ in range(BISECTIONS):
        f = cdf(x) - q
        lo, hi = np.where(f < 0, x, lo), np.where(f < 0, hi, x)
        with np.errstate(all="ignore"):
            step = x - f / pdf(x)
        done = (f == 0) | (np.abs(step - x) <= 4 * np.spacing(np.abs(x))) | (hi - lo <= 4 * np.spacing(np.abs(x)))
        inside = np.isfinite(step) & (step > lo) & (step < hi)
        x = np.where(done, x, np.where(inside, step, (lo + hi) / 2))
        if done.all():
            break
    return x


class DiscreteMixture(_TwoParts, stats.rv_discrete):
    """A two-part mixture of frozen integer laws."""

    def __init__(self, first: Any, second: Any, w: float) -> None:
        super().__init__(**self._parts(first, second, w), name="discrete_mixture")

    def _pmf(self, k: Any) -> Any:
        return self._mix("pmf", k)

    def _ppf(self, q: Any) -> Any:
        q = np.asarray(q, dtype=float)
        return _bisect(self._cdf, q, *self._bracket(q), integer=True)


def _mixture_stats(parts: Sequence[Any], w: float) -> tuple[float, float, None, None]:
    """Mean and variance of a two-part mixture (NaN where a part has none)."""
    (m1, v1), (m2, v2) = ((float(m), float(v)) for m, v in (p.stats(moments="mv") for p in parts))
    if not all(math.isfinite(x) for x in (m1, v1, m2, v2)):
        return math.nan, math.nan, None, None
    mean = w * m1 + (1 - w) * m2
    return mean, w * (v1 + m1**2) + (1 - w) * (v2 + m2**2) - mean**2, None, None


class Truncated(stats.rv_continuous):
    """A continuous law conditioned on [lower, upper] (either may be infinite)."""

    def __init__(self, base: Any, lower: float, upper: float) -> None:
        lo, hi = (float(v) for v in base.support())
        self.base, self.lower, self.upper = base, max(float(lower), lo), min(float(upper), hi)
        self.f_lower, self.s_upper = float(base.cdf(self.lower)), float(base.sf(self.upper))
        self.mass = 1.0 - self.f_lower - self.s_upper
        if not self.mass > 0:
            raise ValueError(f"no mass between {lower} and {upper}")
        super().__init__(a=self.lower, b=self.upper, name="truncated")

    def _cdf(self, x: Any) -> Any:
        return np.clip((self.base.cdf(x) - self.f_lower) / self.mass, 0.0, 1.0)

    def _sf(self, x: Any) -> Any:
        return np.clip((self.base.sf(x) - self.s_upper) / self.mass, 0.0, 1.0)

    def _pdf(self, x: Any) -> Any:
        return self.base.pdf(x) / self.mass

    def _ppf(self, q: Any) -> Any:
        q = np.asarray(q, dtype=float)
        lower_side = self.f_lower + q * self.mass
        upper_side = self.s_upper + (1 - q) * self.mass
        with np.errstate(all="ignore"):
            x = np.where(lower_side <= 0.5, self.base.ppf(lower_side), self.base.isf(upper_side))
        return np.clip(x, self.lower, self.upper)

    def _stats(self) -> tuple[float, float, None, None]:
        return _bounded_stats(self.base, self.lower, self.upper, self.mass)


def _bounded_stats(base: Any, lower: float, upper: float, mass: float) -> tuple[float, float, None, None]:
    """Mean and variance of a law truncated to [lower, upper] (``base.expect``; NaN if unbounded and
    the base has no variance)."""
    if not (math.isfinite(lower) and math.isfinite(upper)) and not math.isfinite(float(base.var())):
        return math.nan, math.nan, None, None
    m1 = float(base.expect(lambda x: x, lb=lower, ub=upper)) / mass
    m2 = float(base.expect(lambda x: x * x, lb=lower, ub=upper)) / mass
    return m1, max(m2 - m1 * m1, 0.0), None, None


class DiscreteTruncated(stats.rv_discrete):
    """An integer law conditioned on the integers of [lower, upper]."""

    def __init__(self, base: Any, lower: float, upper: float) -> None:
        lo, hi = (float(v) for v in base.support())
        self.base = base
        self.lower = max(math.ceil(lower), lo) if math.isfinite(lower) else lo
        self.upper = min(math.floor(upper), hi) if math.isfinite(upper) else hi
        self.f_lower = float(base.cdf(self.lower - 1))
        self.mass = float(base.cdf(self.upper)) - self.f_lower
        if not self.mass > 0:
            raise ValueError(f"no mass between {lower} and {upper}")
        super().__init__(a=self.lower, b=self.upper, name="discrete_truncated")

    def _pmf(self, k: Any) -> Any:
        return self.base.pmf(k) / self.mass

    def _cdf(self, k: Any) -> Any:
        return np.clip((self.base.cdf(k) - self.f_lower) / self.mass, 0.0, 1.0)

    def _ppf(self, q: Any) -> Any:
        q = np.asarray(q, dtype=float)
        return _bisect(self._cdf, q, np.full_like(q, self.lower), np.full_like(q, self.upper), integer=True)

    def _stats(self) -> tuple[float, float, None, None]:
        ks = np.arange(self.lower, self.upper + 1)
        p = self._pmf(ks)
        mean = float((ks * p).sum())
        return mean, float(((ks - mean) ** 2 * p).sum()), None, None


class Rounded(stats.rv_discrete):
    """A continuous law rounded to the nearest integer: P(k) = F(k + 1/2) - F(k - 1/2)."""

    def __init__(self, base: Any) -> None:
        lo, hi = (float(v) for v in base.support())
        self.base = base
        a = math.floor(lo + 0.5) if math.isfinite(lo) else -math.inf
        b = math.ceil(hi - 0.5) if math.isfinite(hi) else math.inf
        super().__init__(a=a, b=b, name="rounded")

    def _cdf(self, k: Any) -> Any:
        return self.base.cdf(np.asarray(k, dtype=float) + 0.5)

    def _sf(self, k: Any) -> Any:
        return self.base.sf(np.asarray(k, dtype=float) + 0.5)

    def _pmf(self, k: Any) -> Any:
        k = np.asarray(k, dtype=float)
        upper = k >= float(self.base.median())  # the smaller of the two differences, for precision
        with np.errstate(all="ignore"):
            left = self.base.cdf(k + 0.5) - self.base.cdf(k - 0.5)
            right = self.base.sf(k - 0.5) - self.base.sf(k + 0.5)
        return np.where(upper, right, left)

    def _ppf(self, q: Any) -> Any:
        q = np.asarray(q, dtype=float)
        with np.errstate(all="ignore"):
            guess = np.ceil(self.base.ppf(q) - 0.5)
        lo, hi = float(self.a), float(self.b)
        guess = np.clip(guess, lo, hi)
        return _bisect(self._cdf, q, np.maximum(guess - 2, lo), np.minimum(guess + 2, hi), integer=True)

    def _rvs(self, size: Any = None, random_state: Any = None) -> Any:
        return np.floor(self.base.rvs(size=size, random_state=random_state) + 0.5)

    def _stats(self) -> tuple[float, float, None, None]:
        if not math.isfinite(float(self.base.var())):
            return math.nan, math.nan, None, None
        lo, hi = (float(v) for v in self.ppf([1e-12, 1 - 1e-12]))
        ks = np.arange(lo, hi + 1)
        p = self._pmf(ks)
        mean = float((ks * p).sum() / p.sum())
        return mean, float(((ks - mean) ** 2 * p).sum() / p.sum()), None, None


def _law(law: Any) -> Any:
    law.dist = law  # a frozen scipy law names its generator ``dist``: these are their own
    return law


def mixture(first: Any, second: Any, w: float) -> Any:
    """The mixture of two frozen laws of one kind (both integer, or both continuous)."""
    discrete = hasattr(first.dist, "pmf")
    return _law((DiscreteMixture if discrete else Mixture)(first, second, w))


def truncated(base: Any, lower: float, upper: float) -> Any:
    """The frozen law ``base`` conditioned on [lower, upper]."""
    return _law((DiscreteTruncated if hasattr(base.dist, "pmf") else Truncated)(base, lower, upper))


def rounded(base: Any) -> Any:
    """The integer law of a frozen continuous law rounded to the nearest integer."""
    return _law(Rounded(base))
