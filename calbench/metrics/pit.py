"""Scale-free sampling metrics from the probability integral transform (PIT), as pure functions.

If x is an exact draw from a continuous law F, u = F(x) is Uniform(0, 1), whatever the
family: so distances between the u's and the uniform law compare across families and are
never ruled by one wild answer (a valid 1e13 from an unbounded law is a u near 1, no more).
For an integer law calbench uses the *non-randomized* PIT (Czado, Gneiting and Held 2009,
Biometrics 65): a sample x contributes the uniform law on [F(x - 1), F(x)] instead of one
point, so exact samples give exactly uniform PIT values in expectation and nothing depends on
a random draw. Every sample is then an interval [a_i, b_i] (a_i = b_i for continuous laws),
and the PIT distribution function of n samples is

    G(u) = (1/n) Σ_i min(1, max(0, (u - a_i) / (b_i - a_i)))      (a step at a_i when a_i = b_i)

* ``pit_w1`` = ∫_0^1 |G(u) - u| du, the Wasserstein-1 distance between the PIT values and
  Uniform(0, 1): 0 for a perfectly uniform G, at most 1/2 (every u at 0 or at 1);
* ``pit_ks`` = sup_u |G(u) - u|, the Kolmogorov-Smirnov statistic of the PIT values (for a
  continuous law, scipy.stats.kstest's statistic of the samples).

Both are computed exactly: G is linear between the interval ends (with steps at degenerate
ones), so each piece's integral and extremes have closed forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np
from scipy import stats

from calbench.cache import DamagedEntryError, floats, simulated
from calbench.families import Target
from calbench.stats import seed_for


def pit_intervals(values: np.ndarray, target: Target) -> tuple[np.ndarray, np.ndarray]:
    """[a_i, b_i] of each valid sample: [F(x), F(x)] for continuous laws, [F(x - 1), F(x)] for integer ones."""
    x = np.asarray(values, dtype=float)
    law = target.law
    distinct, inverse = np.unique(x, return_inverse=True)  # F once per distinct answer (they repeat)
    inverse = inverse.reshape(x.shape)
    with np.errstate(over="ignore", divide="ignore"):  # far tails: F is 0 or 1, exactly what it returns
        if not target.integer:
            u = np.clip(law.cdf(distinct), 0.0, 1.0)[inverse]
            return u, u
        k = np.rint(distinct)
        return np.clip(law.cdf(k - 1), 0.0, 1.0)[inverse], np.clip(law.cdf(k), 0.0, 1.0)[inverse]


def _ramps(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's share of G at the knots ``t``, left limit and value: (intervals, knots).

    A ramp from 0 at a to 1 at b; a step at b for a point (a = b)."""
    spread = (b > a)[:, None]
    ramp = np.clip((t[None, :] - a[:, None]) / np.where(spread, (b - a)[:, None], 1.0), 0.0, 1.0)
    return np.where(spread, ramp, t[None, :] > b[:, None]), np.where(spread, ramp, t[None, :] >= b[:, None])


def _distances(weights: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pit_w1, pit_ks) of each row of ``weights`` (rows of interval shares summing to 1): G is linear
    between the knots, so each piece's integral and the extremes (at the knots) are exact."""
    t = np.unique(np.concatenate([[0.0, 1.0], a, b]))
    ramp_left, ramp_right = _ramps(a, b, t)
    left, right = weights @ ramp_left, weights @ ramp_right
    w1 = np.sum(_abs_integral(right[:, :-1] - t[:-1], left[:, 1:] - t[1:], np.diff(t)), axis=1)
    ks = np.maximum(np.max(np.abs(left - t), axis=1), np.max(np.abs(right - t), axis=1))
    return w1, ks


def _abs_integral(h0: np.ndarray, h1: np.ndarray, width: np.ndarray) -> np.ndarray:
    """∫ |h| over intervals of ``width`` on which h is linear from h0 to h1."""
    same_sign = h0 * h1 >= 0
    both = np.abs(h0) + np.abs(h1)
    crossing = np.where(both > 0, (h0 * h0 + h1 * h1) / np.where(both > 0, both, 1.0), 0.0)
    return width / 2 * np.where(same_sign, both, crossing)


def _distinct(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct intervals and their shares (integer samples repeat: few distinct intervals)."""
    pairs, counts = np.unique(np.stack([a, b], axis=1), axis=0, return_counts=True)
    return pairs[:, 0], pairs[:, 1], counts / a.size


def pit_w1_ks(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(``pit_w1``, ``pit_ks``) of one prompt's PIT intervals (module docstring); NaNs without samples."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size == 0:
        return float("nan"), float("nan")
    if np.array_equal(a, b):  # continuous: G is the empirical CDF of the u's
        w1, ks = _uniform_distances(np.sort(a)[None, :])
        return float(w1[0]), float(ks[0])
    a, b, weight = _distinct(a, b)
    w1, ks = _distances(weight[None, :], a, b)
    return float(w1[0]), float(ks[0])


def pit_w1_weighted(a: np.ndarray, b: np.ndarray, weights: np.ndarray) -> float:
    """∫_0^1 |G(u) - u| du of PIT intervals with probability ``weights`` (summing to 1) instead
    of one sample each: an enumerated answer distribution's exact PIT distance. Equal intervals
    are merged first; points (continuous laws) take one sort, not an intervals-by-knots matrix."""
    w = np.asarray(weights, dtype=float)
    if w.size == 0:
        return float("nan")
    pairs, inverse = np.unique(
        np.stack([np.asarray(a, dtype=float), np.asarray(b, dtype=float)], 1), axis=0, return_inverse=True
    )
    w = np.bincount(inverse.reshape(-1), weights=w, minlength=len(pairs)) / w.sum()
    lo, hi = pairs[:, 0], pairs[:, 1]
    if np.any(hi > lo):
        w1, _ = _distances(w[None, :], lo, hi)
        return float(w1[0])
    t = np.concatenate([[0.0], lo, [1.0]])  # sorted (np.unique), G constant between knots
    g = np.concatenate([[0.0], np.cumsum(w)])  # G on [t_k, t_k+1)
    return float(np.sum(_abs_integral(g - t[:-1], g - t[1:], np.diff(t))))


def pit_w1(a: np.ndarray, b: np.ndarray) -> float:
    """∫_0^1 |G(u) - u| du (module docstring); NaN without samples."""
    return pit_w1_ks(a, b)[0]


def pit_ks(a: np.ndarray, b: np.ndarray) -> float:
    """sup_u |G(u) - u| (module docstring); NaN without samples."""
    return pit_w1_ks(a, b)[1]


def _uniform_distances(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pit_w1, pit_ks) of sorted point PIT values, one row per set: G is a step function.

    ∫ |G - u| = Σ_k ∫_{u_(k)}^{u_(k+1)} |k/n - t| dt with u_(0) = 0, u_(n+1) = 1.
    """
    n = u.shape[-1]
    cap = (*u.shape[:-1], 1)
    edges = np.concatenate([np.zeros(cap), u, np.ones(cap)], axis=-1)
    lo, hi = edges[..., :-1], edges[..., 1:]
    c = np.arange(n + 1) / n  # G on (u_(k), u_(k+1))
    inside = np.clip(c, lo, hi)
    # ∫_lo^hi |c - t| dt = ((c' - lo)^2 + (hi - c')^2) / 2 + |c - c'| (hi - lo), c' = c clipped into [lo, hi]
    w1 = (((inside - lo) ** 2 + (hi - inside) ** 2) / 2 + np.abs(c - inside) * (hi - lo)).sum(-1)
    i = np.arange(1, n + 1) / n
    ks = np.maximum(np.max(i - u, axis=-1), np.max(u - (i - 1 / n), axis=-1))
    return w1, ks


PIT_FLOOR_REPS = 4000  # exact-sampler replicates behind a PIT floor (its Monte-Carlo SE: se below)
KS_REPS = 100_000  # replicates behind a calibrated discrete KS p-value (resolution 1e-5)
KS_N = 100  # KS@N: the first N valid samples of a prompt are tested
KS_THRESHOLD = 1e-4  # a prompt passes KS@N when its p-value exceeds this


@dataclass(frozen=True)
class PitFloor:
    """What n exact draws score in ``pit_w1``: the median (the floor), a robust spread of the
    exact sampler's ``pit_w1`` ((q84 - q16) / 2) and the Monte-Carlo SE of the median."""

    median: float
    spread: float
    se: float
    q95: float = float("nan")  # the 95th percentile: exact draws score at most this 95% of the time


def pit_w1_rows(rows: np.ndarray, target: Target) -> np.ndarray:
    """``pit_w1`` of each row of valid samples at once (rows of equal length)."""
    if target.integer:
        return integer_pit_w1_ks(np.rint(rows), target)[0]
    return _uniform_distances(np.sort(np.clip(target.law.cdf(rows), 0.0, 1.0), axis=1))[0]


def resampled_pit_w1(values: np.ndarray, picks: np.ndarray, target: Target) -> np.ndarray:
    """``pit_w1_rows(values[picks], target)``, each row of ``picks`` a resample's indices: for a
    continuous law the PIT of ``values`` is taken once and resampled with them."""
    if target.integer:
        return pit_w1_rows(values[picks], target)
    u = np.clip(target.law.cdf(values), 0.0, 1.0)
    return _uniform_distances(np.sort(u[picks], axis=1))[0]


def _exact_pit_w1(target: Target, n: int, reps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if not target.integer:  # the PIT of exact continuous draws is Uniform(0, 1) whatever the law
        return _uniform_distances(np.sort(rng.random((reps, n)), axis=1))[0]
    return pit_w1_rows(target.law.rvs(size=(reps, n), random_state=rng), target)


COUNTING_CELLS = 10_000_000  # rows x lattice span below which integer draws are tallied by bincount (no sort)


def integer_pit_w1_ks(draws: np.ndarray, target: Target) -> tuple[np.ndarray, np.ndarray]:
    """(pit_w1, pit_ks) of each row of integer samples at once (rows of equal length).

    Every row's G is a mixture of the same per-value ramps (one per distinct value v, on
    [F(v - 1), F(v)]), so all rows share the knots and G = counts @ ramps / n.
    """
    rows = draws.shape[0]
    lo, hi = (float(draws.min()), float(draws.max())) if draws.size else (0.0, -1.0)
    span = int(hi - lo) + 1
    if draws.size and span * rows <= COUNTING_CELLS:  # a narrow lattice: count each row's values at once
        offsets = (draws - lo).astype(np.int64) + span * np.arange(rows)[:, None]
        tally = np.bincount(offsets.reshape(-1), minlength=rows * span).reshape(rows, span)
        seen = tally.any(axis=0)
        values, counts = lo + np.flatnonzero(seen).astype(float), tally[:, seen].astype(float)
    else:
        values, inverse = np.unique(draws, return_inverse=True)
        counts = np.zeros((rows, values.size))
        np.add.at(counts, (np.repeat(np.arange(rows), draws.shape[1]), inverse.reshape(-1)), 1.0)
    return _distances(counts / draws.shape[1], *pit_intervals(values, target))


def _pit_key(target: Target) -> str:
    """What an exact sampler's PIT statistics depend on: the law for an integer one, nothing for a
    continuous one (its PIT values are uniform whatever the law)."""
    return "continuous" if not target.integer else target.key


@lru_cache(maxsize=4096)
def pit_floor(target: Target, n: int, reps: int = PIT_FLOOR_REPS) -> PitFloor:
    """The ``pit_w1`` that n exact draws typically score (seeded from the law and n: reproducible).

    For continuous laws it depends on n alone (the PIT values are uniform), for integer laws
    on the law too (the non-randomized PIT of a lattice).
    """
    if n <= 0:
        return PitFloor(float("nan"), float("nan"), float("nan"))
    key = _pit_key(target)

    def simulate() -> dict[str, np.ndarray]:
        per_rep = _exact_pit_w1(target, n, reps, seed_for("pit floor", key, n, reps))
        return {"q": np.quantile(per_rep, [0.16, 0.5, 0.84, 0.95])}

    q16, q50, q84, q95 = simulated(f"pit floor|{key}|{n}|{reps}", simulate, floats("q", 4))  # calbench.cache
    spread = float(q84 - q16) / 2
    return PitFloor(float(q50), spread, float(np.sqrt(np.pi / 2) * spread / np.sqrt(reps)), float(q95))


Q95_PRECISION = (
    1e-3  # the table's relative Monte-Carlo error (its 95% interval's half-width): calbench.metrics.q95_table
)
Q95_PRECISION_ELSE = 5e-3  # the same for an integer law the table lacks, simulated when asked (25x cheaper)
Q95_BATCH = 20_000  # replicates per batch of exact draws
# An integer law's pit_w1 takes few values: where its 95th percentile sits on one of them and the
# interval straddles two, more replicates do not shrink the error; the simulation stops here and
# the table states the error reached.
Q95_MAX_REPS = 1_000_000


def q95_reps(per_rep: np.ndarray) -> tuple[float, float]:
    """(the 95th percentile of ``per_rep``, its relative Monte-Carlo error): the order statistics
    k = 0.95 r ± 1.96 sqrt(0.95 · 0.05 · r) bracket the true percentile with 95% probability
    (the binomial count below it); half their gap over the estimate is the error stated."""
    r = per_rep.size
    x = np.sort(per_rep)
    half = 1.96 * np.sqrt(0.95 * 0.05 * r)
    lo, hi = (int(np.clip(round(0.95 * r + s * half), 0, r - 1)) for s in (-1, 1))
    q = float(np.quantile(x, 0.95))
    return q, float((x[hi] - x[lo]) / 2 / q) if q > 0 else 0.0


@lru_cache(maxsize=4096)
def exact_q95(target: Target, n: int) -> float:
    """The 95th percentile of the ``pit_w1`` of n exact draws: the calibration score's full-credit
    threshold. Read from the committed table (``calbench.metrics.q95_table``: any continuous law at
    n = 1..50, the evaluated prompt sets' integer laws at the score's 50, each to the error it states
    in ``ERRORS``, 0.10-0.28% relative at 95%); an integer law the table lacks is simulated in batches of ``Q95_BATCH`` seeded
    replicates until its error is below ``Q95_PRECISION_ELSE`` (0.5%). (4,000 replicates, the PIT
    floor's, left 0.6% of error: a threshold, and every adapter's score, moved by 0.1-0.15 points.)"""
    from calbench.metrics.q95_table import CONTINUOUS, INTEGER

    if n <= 0:
        return float("nan")
    stored = CONTINUOUS.get(n) if not target.integer else INTEGER.get((target.key, n))
    if stored is not None:
        return stored
    precision = Q95_PRECISION if not target.integer else Q95_PRECISION_ELSE
    key = _pit_key(target)
    kept = simulated(  # kept on disk for the next scoring process (calbench.cache)
        f"pit q95|{key}|{n}|{precision}",
        lambda: {"q95": np.array(simulated_q95(target, n, precision)[0])},
        floats("q95", 1),
    )
    return float(kept[0])


def simulated_q95(target: Target, n: int, precision: float = Q95_PRECISION) -> tuple[float, float, int]:
    """(q95, its relative error, replicates) of ``exact_q95``, simulated to ``precision`` (its docstring)."""
    key = _pit_key(target)
    parts: list[np.ndarray] = []
    while True:
        parts.append(_exact_pit_w1(target, n, Q95_BATCH, seed_for("pit q95", key, n, len(parts))))
        q, error = q95_reps(np.concatenate(parts))
        reps = len(parts) * Q95_BATCH
        if error < precision or reps >= Q95_MAX_REPS:
            return q, error, reps


@lru_cache(maxsize=1024)
def _discrete_ks_null(target: Target, n: int, reps: int) -> np.ndarray:
    """Sorted KS statistics of ``reps`` sets of n exact draws from an integer law (fixed seed)."""

    def simulate() -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed_for("ks null", target.key, n, reps))
        chunk = 5000  # rows per batch: keeps the (rows x knots) matrices small
        parts = [
            integer_pit_w1_ks(np.rint(target.law.rvs(size=(min(chunk, reps - i), n), random_state=rng)), target)[1]
            for i in range(0, reps, chunk)
        ]
        values, counts = np.unique(np.concatenate(parts), return_counts=True)  # few distinct values: kept small
        return {"values": values, "counts": counts}

    # 1-4 s per law: kept on disk for the next scoring process (calbench.cache)
    return simulated(f"ks null|{target.key}|{n}|{reps}", simulate, partial(_ks_null, reps))


def _ks_null(reps: int, null: dict[str, np.ndarray]) -> np.ndarray:
    """A stored KS null as its sorted statistics: ``reps`` of them, finite and in [0, 1], or the
    entry is damaged (``calbench.cache``)."""
    values, counts = null["values"], null["counts"]
    if values.ndim != 1 or values.shape != counts.shape or counts.sum() != reps or np.any(counts < 1):
        raise DamagedEntryError(f"expected values and counts of {reps} statistics, got {values.shape}, {counts.shape}")
    if not np.all((values >= 0) & (values <= 1)) or np.any(np.diff(values) <= 0):
        raise DamagedEntryError("the statistics are not increasing values in [0, 1]")
    return np.repeat(values, counts)


def ks_pvalue(values: np.ndarray, target: Target, reps: int = KS_REPS) -> float:
    """p-value of the KS test of the samples against the law.

    Continuous laws: scipy's one-sample KS test. Integer laws: the KS statistic of the
    non-randomized PIT (max_v |F_n(v) - F(v)|) against its distribution under exact draws
    at the same n, simulated (``reps`` replicates, fixed seed), ties broken at random:
    p = (#{null > D} + U (1 + #{null = D})) / (1 + reps), so exact samplers are rejected at
    the nominal rate.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan")
    if not target.integer:
        return float(stats.kstest(x, target.law.cdf).pvalue)
    d = pit_w1_ks(*pit_intervals(x, target))[1]
    null = _discrete_ks_null(target, x.size, reps)
    tie = 1e-12  # statistics equal up to rounding
    above = null.size - np.searchsorted(null, d + tie, side="right")
    equal = null.size - above - np.searchsorted(null, d - tie, side="left")
    # A discrete statistic ties often (Bernoulli: D = |k/n - p|): ties are broken at random, with a
    # seed drawn from the samples themselves, so the p-value is uniform under exact draws and the
    # same samples always get the same p-value.
    tie_break = np.random.default_rng(seed_for("ks tie", target.key, np.sort(x).tobytes().hex())).random()
    return float((above + tie_break * (equal + 1)) / (1 + null.size))


def ks_at_n(values: np.ndarray, target: Target, n: int = KS_N, threshold: float = KS_THRESHOLD) -> bool:
    """KS@N: whether the first ``n`` valid samples pass the KS test at p > ``threshold``;
    a prompt with fewer than ``n`` valid samples fails."""
    x = np.asarray(values, dtype=float)
    if x.size < n:
        return False
    return ks_pvalue(x[:n], target) > threshold


PIT_BOOT_REPS = 200  # bootstrap replicates behind a pit_w1 standard error
SPREAD_REPS = 400  # exact-sampler replicates behind the spread that bounds it below (a spread, not a floor)


def pit_w1_se(values: np.ndarray, target: Target, seed: int = 0) -> float:
    """Standard error of ``pit_w1``: the larger of the bootstrap's (valid samples resampled) and
    an exact sampler's spread at the same n (as ``sampling_metrics.w1_se``, for the same reason:
    the bootstrap under-covers near a perfect sampler)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan")
    floor = pit_floor(target, x.size, SPREAD_REPS).spread
    if x.size < 2:
        return floor
    picks = np.random.default_rng(seed).integers(0, x.size, size=(PIT_BOOT_REPS, x.size))
    return max(float(resampled_pit_w1(x, picks, target).std(ddof=1)), floor)
