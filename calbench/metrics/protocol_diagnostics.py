"""What a sampling protocol's responses yield, and its diagnostics (pure).

``samples_of`` turns one prompt's responses under a protocol (``calbench.protocols``) into
the answer strings scored like independent answers, with the protocol's own per-prompt
diagnostics; ``tokens_per_valid`` is the generated tokens per valid sample.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from calbench.families import Target, ppf
from calbench.metrics import pit
from calbench.metrics.sampling import iqr
from calbench.parse import classify
from calbench.protocols import (
    BATCH_K,
    PROTOCOLS,
    Verbalized,
    batch_items,
    batch_well_formed,
    parse_verbalized,
    ssot_answer,
    verbalized_draw,
)
from calbench.stats import rate_se, seed_for

W1_GRID = 20_000  # quantile midpoints behind a verbalized distribution's W1


@lru_cache(maxsize=1024)
def _quantiles(target: Target) -> np.ndarray:
    return ppf(target.law, (np.arange(W1_GRID) + 0.5) / W1_GRID)


def verbalized_w1(listed: Verbalized, target: Target) -> float:
    """W1 between the listed distribution and the law, in quantile form: ∫_0^1 |G^-1(u) - F^-1(u)| du,
    G^-1 the listed step quantile function, on 20,000 midpoints of [0, 1] (as
    ``scipy.stats.wasserstein_distance`` of the list against the law's quantiles)."""
    u = (np.arange(W1_GRID) + 0.5) / W1_GRID
    steps = np.minimum(np.searchsorted(np.cumsum(listed.probs), u, side="right"), listed.values.size - 1)
    return float(np.mean(np.abs(listed.values[steps] - _quantiles(target))))


# ---- batch: serial dependence within each list ------------------------------------------------


def lag1_autocorrelation(u: np.ndarray) -> float:
    """Lag-1 autocorrelation of one list's PIT values (NaN for fewer than 3 or a constant list)."""
    if u.size < 3 or np.allclose(u, u[0]):
        return math.nan
    d = u - u.mean()
    return float(np.sum(d[1:] * d[:-1]) / np.sum(d * d))


def runs_z(u: np.ndarray) -> float:
    """Wald-Wolfowitz runs test over above/below 1/2: (runs - expected) / sd (NaN if one-sided).

    Exact i.i.d. draws give z ~ N(0, 1); anti-correlated lists that alternate too often give
    large positive z, sticky ones negative."""
    above = u > 0.5
    n1, n2 = int(above.sum()), int((~above).sum())
    if n1 == 0 or n2 == 0:
        return math.nan
    runs = 1 + int(np.sum(above[1:] != above[:-1]))
    n = n1 + n2
    mean = 2 * n1 * n2 / n + 1
    var = 2 * n1 * n2 * (2 * n1 * n2 - n) / (n * n * (n - 1))
    return float((runs - mean) / math.sqrt(var)) if var > 0 else math.nan


def duplicate_rate(values: np.ndarray) -> float:
    """Share of a list's items that repeat an earlier item of the same list."""
    if values.size == 0:
        return math.nan
    return float(1 - np.unique(values).size / values.size)


def exact_duplicate_rate(target: Target, k: int, reps: int = 2000) -> float:
    """What ``duplicate_rate`` averages over lists of k exact draws, canonically formatted."""
    rng = np.random.default_rng(seed_for("duplicates", target.key, k, reps))
    draws = target.law.rvs(size=(reps, k), random_state=rng)
    if not target.integer:
        draws = np.round(draws, 5)
    return float(np.mean([duplicate_rate(row) for row in draws]))


# ---- one prompt's responses -> samples and protocol diagnostics -------------------------------


def _mean_se(values: list[float]) -> tuple[float | None, float | None]:
    """[mean, standard error] of per-response values (None when there are none)."""
    x = np.array([v for v in values if math.isfinite(v)], dtype=float)
    if x.size == 0:
        return None, None
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else None


def _pit_points(values: np.ndarray, target: Target) -> np.ndarray:
    """One PIT value per sample: F(x), or the middle of [F(x - 1), F(x)] for integer laws."""
    a, b = pit.pit_intervals(values, target)
    return (a + b) / 2


def samples_of(protocol: str, responses: list[str], target: Target) -> tuple[list[str], dict[str, list[float | None]]]:
    """The answer strings a protocol's responses yield (scored like independent answers), and
    the protocol's own per-prompt diagnostics as ``[value, se]`` pairs.

    Diagnostics: ``well_formed_rate`` (batch: exactly K numbers; ssot: an ``Answer:`` line;
    verbalized: a parseable list; seeded and independent: every response); batch also ``lag1_autocorr``
    (mean over lists of the lag-1 autocorrelation of their valid items' PIT values; biased
    below 0 for i.i.d. lists: the oracle's lists of 10 average -0.13), ``runs_z`` (mean runs-test z over lists; about 0 for i.i.d.) and
    ``duplicate_excess`` (mean share of repeated items minus what exact draws repeat);
    verbalized also ``verbalized_w1_iqr`` (mean exact W1 of the listed distributions to the
    law, over the IQR).
    """
    n = len(responses)
    extras: dict[str, list[float | None]] = {}
    if protocol == "batch":
        lists = [batch_items(r) for r in responses]
        items = [i for items in lists for i in items]
        formed = sum(batch_well_formed(r) for r in responses)
        acs, runs, dups = [], [], []
        for row in lists:
            answers = [classify(i, target) for i in row]
            values = np.array([a.value for a in answers if a.valid], dtype=float)
            if values.size:
                u = _pit_points(values, target)
                acs.append(lag1_autocorrelation(u))
                runs.append(runs_z(u))
                dups.append(duplicate_rate(np.round(values, 5)))
        extras["lag1_autocorr"] = list(_mean_se(acs))
        extras["runs_z"] = list(_mean_se(runs))
        dup, dup_se = _mean_se(dups)
        extras["duplicate_excess"] = [None if dup is None else dup - exact_duplicate_rate(target, BATCH_K), dup_se]
    elif protocol == "ssot":
        items = [ssot_answer(r) for r in responses]
        formed = sum(bool(i) for i in items)
    elif protocol == "verbalized":
        listed = [parse_verbalized(r, target) for r in responses]
        items = [verbalized_draw(v, r, target, i) for i, (v, r) in enumerate(zip(listed, responses, strict=True))]
        formed = sum(v is not None for v in listed)
        scale = iqr(target)
        extras["verbalized_w1_iqr"] = list(_mean_se([verbalized_w1(v, target) / scale for v in listed if v]))
    elif protocol in ("independent", "seeded"):  # every response is one answer
        items, formed = list(responses), n
    else:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    extras["well_formed_rate"] = [formed / n if n else None, rate_se(formed, n) if n else None]
    return items, extras


def tokens_per_valid(tokens: list[int], valid: list[int]) -> list[float | None]:
    """[Σ tokens / Σ valid samples, its delta-method standard error] over one prompt's responses
    (``tokens[i]`` generated for response i, ``valid[i]`` valid samples it yielded)."""
    t, v = np.asarray(tokens, dtype=float), np.asarray(valid, dtype=float)
    if v.sum() == 0:
        return [None, None]
    ratio = float(t.sum() / v.sum())
    if t.size < 2:
        return [ratio, None]
    resid = t - ratio * v
    return [ratio, float(np.sqrt(t.size / (t.size - 1) * np.sum(resid**2)) / v.sum())]
