"""The calibration score that ranks the leaderboard: it does not depend on the number of
samples per prompt (pure).

Per prompt with N responses, m of them valid (valid share v = m / N), the valid answers in
their order are cut into k = floor(m / M_REF) disjoint chunks of M_REF = 50 (one chunk of
all m when m < M_REF). Each chunk's quality is

    q = clip((C - pit_w1) / (C - q95), 0, 1),

where ``pit_w1`` is the chunk's PIT distance to uniform (``calbench.metrics.pit``), q95 the 95th
percentile of what exact draws score at the chunk's size (``pit.exact_q95``: to 0.1%, relative), and C the distance of a sampler
collapsed on the law's median (1/4 for continuous laws, every u at 1/2; for integer laws the
median value's non-randomized PIT interval): a chunk within exact sampling's 95% range gets
full credit, a collapsed one none. The prompt scores

    s = v * mean_chunks(q)          (0 without a valid answer)

and the calibration score is 100 x the mean over the families of the mean over their prompts.

Why it is n-free: v's estimate is unbiased at any N, and each chunk has M_REF valid answers
whatever N is, so E[q] is the same at N = 100 and N = 10^5; more samples only add chunks
(a smaller standard error). That holds once a prompt has M_REF valid answers: below, its one
chunk is smaller and scored against exact sampling at its own size, which is not n-free: the
leaderboard (``calbench.leaderboard.pages.numbers``) refuses rows with fewer than M_REF samples per
prompt and shows the share of prompts below M_REF valid answers. An exact sampler scores
about 100, a collapsed one or one that never answers in format 0. Standard errors: v's Agresti-Coull; the chunk qualities' spread
over sqrt(k) (one chunk: the bootstrap's, the chunk resampled 200 times); in
quadrature (delta method) for s, then across prompts and families.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from calbench.families import Target
from calbench.metrics import pit
from calbench.stats import Estimate, quadrature_mean, rate_se, seed_for

M_REF = 50  # valid answers per chunk: the reference sample size of the score
COLLAPSED = 0.25  # pit_w1 of a sampler collapsed on the median: the zero of the score


class Prompt(NamedTuple):
    """What the score reads of one prompt: its valid answers in their order, its number of
    responses (valid or not) and its law."""

    values: np.ndarray
    n: int
    target: Target


def collapsed_distance(target: Target) -> float:
    """C: the pit_w1 of a sampler collapsed on the law's median, the least far of all collapses.

    1/4 for continuous laws (every u at 1/2); for an integer law the median value's PIT
    interval [F(m - 1), F(m)], whose spread makes it nearer (Poisson(4): 0.15).
    """
    if not target.integer:
        return COLLAPSED
    median = np.array([float(target.law.median())])
    return pit.pit_w1(*pit.pit_intervals(median, target))


def _qualities(w1: np.ndarray, target: Target, size: int) -> np.ndarray:
    """q of chunks of ``size`` valid answers from their ``pit_w1`` values."""
    full, zero = pit.exact_q95(target, size), collapsed_distance(target)
    if zero <= full:  # a near-degenerate law: collapse is within exact sampling's range
        return (w1 <= full).astype(float)
    # Rounded at 1e-12: a collapsed chunk's distance equals C up to floating-point noise.
    return np.round(np.clip((zero - w1) / (zero - full), 0.0, 1.0), 12)


def chunk_quality(values: np.ndarray, target: Target) -> float:
    """q of one chunk of valid answers (module docstring)."""
    return _chunk_quality(*pit.pit_intervals(values, target), target)


def _chunk_quality(a: np.ndarray, b: np.ndarray, target: Target) -> float:
    """q of one chunk from its answers' PIT intervals."""
    return float(_qualities(np.array([pit.pit_w1(a, b)]), target, a.size)[0])


BOOT_REPS = 200  # bootstrap replicates behind the standard error of a prompt's only chunk


def _one_chunk_se(values: np.ndarray, target: Target) -> float:
    """The standard error of a lone chunk's q: the chunk resampled with replacement."""
    rng = np.random.default_rng(seed_for("score bootstrap", target.key, values.size))
    picks = rng.integers(0, values.size, size=(BOOT_REPS, values.size))
    return float(_qualities(pit.resampled_pit_w1(values, picks, target), target, values.size).std(ddof=1))


def prompt_score(values: Sequence[float] | np.ndarray, n: int, target: Target) -> Estimate:
    """s of one prompt: ``values`` its valid answers in order, ``n`` all its responses."""
    x = np.asarray(values, dtype=float)
    if n <= 0:
        return Estimate(math.nan, math.nan)
    v, v_se = x.size / n, rate_se(x.size, n)
    if x.size == 0:
        return Estimate(0.0, v_se)  # s <= v, and v is only known to within its SE
    k = max(1, x.size // M_REF)
    size = M_REF if x.size >= M_REF else x.size
    a, b = pit.pit_intervals(x[: k * size], target)  # the PIT once, for every chunk
    qs = np.array(
        [_chunk_quality(a[i * size : (i + 1) * size], b[i * size : (i + 1) * size], target) for i in range(k)]
    )
    q = float(qs.mean())
    q_se = float(qs.std(ddof=1) / math.sqrt(k)) if k > 1 else _one_chunk_se(x[:size], target)
    return Estimate(v * q, math.hypot(q * v_se, v * q_se))


def calibration_score(prompts: Mapping[str, Sequence[Prompt]]) -> Estimate:
    """100 x the mean over families (keys) of the mean over their prompts' scores."""
    families = [
        quadrature_mean([prompt_score(p.values, p.n, p.target) for p in rows], nan="propagate")
        for rows in prompts.values()
    ]
    mean = quadrature_mean(families, nan="propagate")
    return Estimate(100 * mean.value, 100 * mean.se)
