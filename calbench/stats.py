"""calbench's statistics vocabulary: estimates, their standard errors, seeds and aggregates.

Every number calbench reports is an ``Estimate`` (a value and its standard error) and
every aggregation goes through the functions here, so there is one rule per question:

* ``rate``: a share k / n with the Agresti-Coull standard error (``rate_se``);
* ``quadrature_mean``: the mean of independent estimates, standard errors combined in
  quadrature (families of a task, prompts of a family, families of a tier);
* ``family_means``: calbench's one aggregation of per-prompt values: the mean over each
  family's prompts, then equal weight over families (both ``quadrature_mean``);
* ``sample_mean``: the mean of plain values that are a sample (prompts of a transfer
  task, paragraphs of the drift text), standard error from their spread;
* ``bootstrap_median``: the median of estimates (parametric bootstrap) or of a sample
  (resampling), its standard error from 2000 bootstrap draws.

Undefined values (NaN or None: the W1 of a prompt without one valid answer) follow an
explicit ``nan`` policy, because the right rule depends on what is averaged:

* ``"propagate"``: any undefined value makes the aggregate undefined (averaging only the
  families a model answers would reward answering less);
* ``"omit"``: undefined values are left out (a prompt too small to test is no failure);
* ``"worst"`` (medians only): an undefined value counts as worse than every defined one,
  +inf for a lower-is-better metric, so the median stays defined while fewer than half
  of the values are missing.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

Z95 = 1.959963984540054  # the 97.5% normal quantile: value ± Z95 * se is a 95% interval
BOOTSTRAP_DRAWS = 2000

NanPolicy = Literal["propagate", "omit"]
MedianNanPolicy = Literal["omit", "worst"]
R = TypeVar("R")


@dataclass(frozen=True)
class Estimate:
    """A value and its standard error (NaN when undefined; 0 for an exact value)."""

    value: float
    se: float


UNDEFINED = Estimate(math.nan, math.nan)


@dataclass(frozen=True)
class Summary:
    """Per-family and overall estimates of every metric for one set of prompts."""

    families: dict[str, dict[str, Estimate]]  # family -> metric -> estimate
    overall: dict[str, Estimate]  # metric (and "<metric>_median") -> estimate
    n_prompts: int


def seed_for(*parts: object) -> int:
    """A reproducible 63-bit seed from any printable parts (stable across runs and platforms)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def rate_se(successes: int, n: int) -> float:
    """Standard error of a rate, Agresti-Coull style: never 0 at a rate of 0 or 1.

    p~ = (k + 2) / (n + 4), se = sqrt(p~ (1 - p~) / (n + 4)).
    """
    p = (successes + 2) / (n + 4)
    return float(np.sqrt(p * (1 - p) / (n + 4)))


def rate(successes: int, n: int) -> Estimate:
    """k / n with its Agresti-Coull standard error; undefined for n = 0."""
    if n <= 0:
        return UNDEFINED
    return Estimate(successes / n, rate_se(successes, n))


def _defined(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def quadrature_mean(estimates: Sequence[Estimate], nan: NanPolicy) -> Estimate:
    """Mean of independent estimates: (1/k) Σ v_i, se = sqrt(Σ se_i²) / k.

    An undefined standard error counts as 0 (an exact value, e.g. a likelihood metric).
    Undefined values follow ``nan`` (module docstring); no values at all: undefined.
    """
    kept = [e for e in estimates if _defined(e.value)] if nan == "omit" else list(estimates)
    if not kept or not all(_defined(e.value) for e in kept):
        return UNDEFINED
    se = math.hypot(*(e.se for e in kept if _defined(e.se))) / len(kept)  # hypot: no overflow at 1e308
    values = np.array([e.value for e in kept], dtype=float)
    with np.errstate(over="ignore"):
        mean = float(np.mean(values))
    if not math.isfinite(mean):  # the sum overflowed (values near 1e308): divide first
        mean = float(np.sum(values / len(kept)))
    return Estimate(mean, se)


def by_family(records: Iterable[R], family: Callable[[R], str]) -> dict[str, list[R]]:
    """Records grouped by family, families in order of first appearance."""
    out: dict[str, list[R]] = {}
    for r in records:
        out.setdefault(family(r), []).append(r)
    return out


def family_means(
    groups: Mapping[str, Sequence[R]],
    metrics: Sequence[str],
    value: Callable[[R, str], Estimate],
    nan: NanPolicy = "propagate",
) -> tuple[dict[str, dict[str, Estimate]], dict[str, Estimate]]:
    """(per family, overall) means of ``value(record, metric)``: within a family the mean over
    its prompts, then equal weight over families (``quadrature_mean``, both with ``nan``)."""
    families = {
        f: {m: quadrature_mean([value(r, m) for r in rs], nan=nan) for m in metrics} for f, rs in groups.items()
    }
    overall = {m: quadrature_mean([families[f][m] for f in families], nan=nan) for m in metrics}
    return families, overall


def exact(value: float | None) -> Estimate:
    """An exact value (no sampling noise: standard error 0); None is undefined."""
    return Estimate(math.nan if value is None else float(value), 0.0)


def sample_mean(values: Sequence[float | None], nan: NanPolicy) -> Estimate:
    """Mean of a sample: x̄, se = s / sqrt(n) with s the sample standard deviation (ddof 1).

    Undefined for an empty sample; the standard error is undefined for a single value.
    """
    if nan == "propagate" and not all(_defined(v) for v in values):
        return UNDEFINED
    v = np.array([x for x in values if _defined(x)], dtype=float)
    if v.size == 0:
        return UNDEFINED
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else math.nan
    return Estimate(float(v.mean()), se)


def bootstrap_median(
    values: Sequence[float | None],
    nan: MedianNanPolicy,
    seed: int,
    ses: Sequence[float] | None = None,
) -> Estimate:
    """The median of ``values`` and its bootstrap standard error (``BOOTSTRAP_DRAWS`` draws).

    With ``ses`` the values are fixed estimates with independent normal errors
    (families of a task): each draw adds N(0, se_i²) noise to every value (parametric
    bootstrap; an undefined se counts as 0). Without, the values are a sample (prompts):
    each draw resamples them with replacement. Undefined values follow ``nan``
    (module docstring); the median is undefined when it lands on a missing value.
    """
    x = np.array([v if _defined(v) else np.nan for v in values], dtype=float)
    if nan == "omit":
        keep = np.isfinite(x)
        x = x[keep]
        if ses is not None:
            ses = [s for s, k in zip(ses, keep, strict=True) if k]
    else:
        x = np.where(np.isfinite(x), x, np.inf)
    if x.size == 0:
        return UNDEFINED
    rng = np.random.default_rng(seed)
    if ses is not None:
        noise = np.nan_to_num(np.asarray(ses, dtype=float))
        draws = np.median(x + rng.standard_normal((BOOTSTRAP_DRAWS, x.size)) * noise, axis=1)
    else:
        draws = np.median(x[rng.integers(0, x.size, (BOOTSTRAP_DRAWS, x.size))], axis=1)
    value = float(np.median(x))
    if not math.isfinite(value):
        return UNDEFINED
    se = float(draws.std(ddof=1)) if np.all(np.isfinite(draws)) else math.nan
    return Estimate(value, se)


@dataclass(frozen=True)
class PairedDelta:
    """tuned - base over paired items: the mean difference, its bootstrap SE and 95% percentile interval."""

    delta: Estimate
    low: float
    high: float
    n: int


def paired_bootstrap(
    base: Sequence[float], tuned: Sequence[float], seed: int, draws: int = BOOTSTRAP_DRAWS
) -> PairedDelta:
    """The mean of ``tuned[i] - base[i]`` with a paired bootstrap: each draw resamples the items
    (both scores of an item together), so what the two runs share cancels.

    SE: the draws' standard deviation; interval: their 2.5% and 97.5% percentiles.
    """
    b, t = np.asarray(base, dtype=float), np.asarray(tuned, dtype=float)
    if b.shape != t.shape or b.ndim != 1:
        raise ValueError(f"paired scores need one base and one tuned score per item, got {b.shape} and {t.shape}")
    if b.size == 0:
        return PairedDelta(UNDEFINED, math.nan, math.nan, 0)
    d = t - b
    means = d[np.random.default_rng(seed).integers(0, d.size, (draws, d.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return PairedDelta(Estimate(float(d.mean()), float(means.std(ddof=1))), float(low), float(high), int(d.size))


def fmt(e: Estimate) -> str:
    """``value ± half-width of the 95% interval``, 3 significant digits (exact values: no ±)."""
    if not math.isfinite(e.value):
        return "n/a"
    if not math.isfinite(e.se) or e.se == 0:
        return f"{e.value:.3g}"
    return f"{e.value:.3g} ± {Z95 * e.se:.2g}"
