"""Where a U-shaped PIT comes from: the answers in the law's outer tails, and whether answers
follow the parameters as the law does. Pure functions of the valid answers per prompt.

A PIT histogram piled up at 0 and 1 says that too many valid answers fall in the law's tails,
not why. This module splits that mass:

* ``outer share``: the share of a prompt's valid answers whose PIT lies in the outer
  ``2 * TAIL`` of the law (below ``TAIL`` or above ``1 - TAIL``), low and high apart. For an
  integer law an answer x carries the uniform law on [F(x - 1), F(x)] (the non-randomized PIT of
  ``calbench.metrics.pit``), so it counts with the part of that interval in each tail. Exact
  draws give ``TAIL`` on each side in expectation, for every law, integer or not.
* of the outer share, what is ``far``: answers whose whole PIT interval lies beyond the law's
  ``FAR`` and ``1 - FAR`` quantiles, that is answers a draw from the law would give less than
  once in 500 (0.2% for exact draws); and of those, what is off by ``scale``: at least ten times
  too large or too small for the law (the answer's magnitude ``|x|`` against the law's own,
  ``max(|median|, IQR)``: a wrong number length, a misplaced decimal point).
* of the outer share, the ``echo`` of the prompt: answers equal to one of its parameters or
  to a finite end of the law's support (``uniform(a=3.5, b=10.5)`` answered 3.5 or 10.5; a
  Beta answered 0 or 1).
* ``top outer answers``: the answers that carry the most outer mass (a favourite answer that
  ignores the parameters shows up here, on the same side in prompt after prompt).

Answers outside the law's support (a decimal for Poisson, a negative for a Geometric) are not
valid and have no PIT: the records' ``support_violation_rate`` counts them.

Following the parameters: a model that ignores them answers the same whatever the law's
location. ``location_following`` is Spearman's rank correlation, over prompts, between each
prompt's law median and the median of its valid answers (1 when the answers' medians rise with
the law's, about 0 when they do not follow it), with Fieller, Hartley and Pearson's (1957)
standard error ``1.06 / sqrt(k - 3)`` for ``k`` prompts; ``within_family_following`` is the mean,
over the families with at least three prompts, of the same correlation within each family (SE:
the spread of the families' values). The oracle row (exact draws) gives each statistic's
reference: 10% outer, 0.2% far, a rank correlation near 1.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from calbench.families import Target
from calbench.metrics.calibration import Prompt
from calbench.metrics.pit import pit_intervals
from calbench.stats import UNDEFINED, Estimate, family_means, rate_se, sample_mean

TAIL = 0.05  # each side: the outer 10% of the law
FAR = 0.001  # beyond the law's 0.1% and 99.9% quantiles
SCALE = 10.0  # "wrong scale": ten times too large or too small
MIN_VALID = 10  # a prompt's median answer needs at least this many valid answers
MIN_PROMPTS = 3  # a rank correlation needs at least this many prompts
TOP = 3  # outer answers listed per prompt

SHARES = ("low", "high", "outer", "far", "scale", "echo")


@dataclass(frozen=True)
class Outer:
    """One prompt's valid answers in the law's tails (shares of its valid answers)."""

    valid: int
    low: float  # PIT mass below TAIL
    high: float  # PIT mass above 1 - TAIL
    far: float  # answers beyond the FAR quantiles
    scale: float  # far answers ten times too large or too small
    echo: float  # outer mass on a parameter's value or an end of the support
    top: tuple[tuple[float, float], ...]  # (answer, its share of the valid answers' outer mass)

    @property
    def outer(self) -> float:
        return self.low + self.high

    def estimate(self, share: str) -> Estimate:
        value = float(getattr(self, share))
        if not self.valid:
            return UNDEFINED
        return Estimate(value, rate_se(round(value * self.valid), self.valid))


def tail_mass(a: np.ndarray, b: np.ndarray, tail: float = TAIL) -> tuple[np.ndarray, np.ndarray]:
    """Each answer's PIT mass below ``tail`` and above ``1 - tail`` (uniform on [a, b]; a point if a = b)."""
    width = b - a
    spread = width > 0
    safe = np.where(spread, width, 1.0)
    low = np.where(spread, np.clip((tail - a) / safe, 0.0, 1.0), (b < tail).astype(float))
    high = np.where(spread, np.clip((b - (1.0 - tail)) / safe, 0.0, 1.0), (a > 1.0 - tail).astype(float))
    return low, high


def law_scale(target: Target) -> float:
    """The law's magnitude: the larger of |median| and its interquartile range."""
    q1, med, q3 = target.law.ppf([0.25, 0.5, 0.75])
    return float(max(abs(med), q3 - q1))


def echoes(target: Target) -> np.ndarray:
    """The values an answer can echo: the prompt's parameters and the support's finite ends."""
    ends = [float(e) for e in target.law.support() if math.isfinite(e)]
    return np.array([*target.params.values(), *ends], dtype=float)


def outer_of(values: np.ndarray, target: Target) -> Outer:
    """The tail split of one prompt's valid answers."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Outer(0, math.nan, math.nan, math.nan, math.nan, math.nan, ())
    a, b = pit_intervals(x, target)
    low, high = tail_mass(a, b)
    with np.errstate(over="ignore"):  # a far tail's quantile (Gumbel: exp of exp)
        scale_of_law = law_scale(target)
    far = (b < FAR) | (a > 1.0 - FAR)
    with np.errstate(divide="ignore"):
        ratio = np.abs(np.log10(np.maximum(np.abs(x), 1e-300) / scale_of_law))
    scale = far & (ratio >= math.log10(SCALE))
    echo = np.isclose(x[:, None], echoes(target)[None, :], rtol=1e-6, atol=0.0).any(axis=1)
    mass: Counter[float] = Counter()
    for value, m in zip(x.tolist(), (low + high).tolist(), strict=True):
        if m > 0:
            mass[value] += m
    total = float((low + high).sum())
    top = tuple((v, m / total) for v, m in mass.most_common(TOP)) if total > 0 else ()
    n = x.size
    echo_mass = float(((low + high) * echo).mean())
    return Outer(n, float(low.mean()), float(high.mean()), float(far.mean()), float(scale.mean()), echo_mass, top)


def outer_summary(
    rows: Mapping[str, Sequence[Prompt]],
) -> tuple[dict[str, dict[str, Estimate]], dict[str, Estimate]]:
    """(per family, overall) means of the shares: the mean over a family's prompts, then equal
    weight over families; prompts without a valid answer are left out (a family without any: too)."""
    groups = {f: [outer_of(p.values, p.target) for p in prompts] for f, prompts in rows.items()}
    groups = {f: [o for o in outers if o.valid] for f, outers in groups.items()}
    groups = {f: outers for f, outers in groups.items() if outers}
    return family_means(groups, SHARES, Outer.estimate)


def _medians(prompts: Sequence[Prompt]) -> tuple[np.ndarray, np.ndarray]:
    kept = [(float(p.target.law.median()), float(np.median(p.values))) for p in prompts if p.values.size >= MIN_VALID]
    law, model = (np.array(c, dtype=float) for c in zip(*kept, strict=True)) if kept else (np.array([]),) * 2
    return law, model


def _spearman(law: np.ndarray, model: np.ndarray) -> float:
    if law.size < MIN_PROMPTS or np.ptp(law) == 0 or np.ptp(model) == 0:
        return math.nan
    return float(stats.spearmanr(law, model).statistic)


def location_following(prompts: Sequence[Prompt]) -> Estimate:
    """Spearman's rho over prompts between the law's median and the median valid answer
    (prompts with at least MIN_VALID valid answers; undefined below MIN_PROMPTS of them, or when
    either side is constant). SE: 1.06 / sqrt(k - 3) (Fieller, Hartley and Pearson 1957)."""
    law, model = _medians(prompts)
    rho = _spearman(law, model)
    if math.isnan(rho):
        return UNDEFINED
    return Estimate(rho, 1.06 / math.sqrt(law.size - 3) if law.size > 3 else math.nan)


def within_family_following(rows: Mapping[str, Sequence[Prompt]]) -> Estimate:
    """The mean over families (those with at least MIN_PROMPTS scored prompts and varying
    medians) of each family's rank correlation; SE from the spread over families."""
    values = [_spearman(*_medians(prompts)) for prompts in rows.values()]
    return sample_mean([v for v in values if not math.isnan(v)], nan="omit")
