"""What a sampling protocol's responses yield, and its diagnostics (pure).

``samples_of`` turns one prompt's responses under a protocol (a row of ``calbench.protocols``)
into the answer strings scored like independent answers, with the protocol's own per-prompt
diagnostics (``DIAGNOSTICS``: the functions behind the names a row lists); ``tokens_per_valid``
is the generated tokens per valid sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from calbench.families import Target, ppf
from calbench.metrics import pit
from calbench.metrics.sampling import iqr
from calbench.parse import classify
from calbench.protocols import PROTOCOLS, Verbalized
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


def serial_dependence(lists: Sequence[list[str]], target: Target) -> dict[str, list[float | None]]:
    """A batch protocol's lists: ``lag1_autocorr`` (mean over lists of the lag-1 autocorrelation of
    their valid items' PIT values; biased below 0 for i.i.d. lists: the oracle's lists of 10
    average -0.13), ``runs_z`` (mean runs-test z over lists; about 0 for i.i.d.) and
    ``duplicate_excess`` (mean share of repeated items minus what exact draws repeat)."""
    acs, runs, dups = [], [], []
    k = max((len(row) for row in lists), default=0)  # K: batch_items pads every list to it
    for row in lists:
        answers = [classify(i, target) for i in row]
        values = np.array([a.value for a in answers if a.valid], dtype=float)
        if values.size:
            u = _pit_points(values, target)
            acs.append(lag1_autocorrelation(u))
            runs.append(runs_z(u))
            dups.append(duplicate_rate(np.round(values, 5)))
    dup, dup_se = _mean_se(dups)
    return {
        "lag1_autocorr": list(_mean_se(acs)),
        "runs_z": list(_mean_se(runs)),
        "duplicate_excess": [None if dup is None else dup - exact_duplicate_rate(target, k), dup_se],
    }


def listed_w1(listed: Sequence[Verbalized | None], target: Target) -> dict[str, list[float | None]]:
    """A verbalized protocol's lists: ``verbalized_w1_iqr``, the mean exact W1 of the listed
    distributions to the law, over the IQR (malformed lists left out)."""
    scale = iqr(target)
    return {"verbalized_w1_iqr": list(_mean_se([verbalized_w1(v, target) / scale for v in listed if v]))}


# Each diagnostic a protocol row names (``Protocol.diagnostics``) -> the function that computes it,
# and its siblings, from the row's parsed responses (``Yield.parsed``).
DIAGNOSTICS: dict[str, Callable[[Any, Target], dict[str, list[float | None]]]] = {
    "lag1_autocorr": serial_dependence,
    "runs_z": serial_dependence,
    "duplicate_excess": serial_dependence,
    "verbalized_w1_iqr": listed_w1,
}


def samples_of(protocol: str, responses: list[str], target: Target) -> tuple[list[str], dict[str, list[float | None]]]:
    """The answer strings a protocol's responses yield (scored like independent answers:
    ``Protocol.yields``), and the protocol's own per-prompt diagnostics as ``[value, se]`` pairs:
    ``well_formed_rate`` (the share of responses in its format) and those its row names."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    row = PROTOCOLS[protocol]
    got = row.yields(responses, target)
    extras: dict[str, list[float | None]] = {}
    for diagnose in dict.fromkeys(DIAGNOSTICS[name] for name in row.diagnostics):
        extras.update(diagnose(got.parsed, target))
    n = len(responses)
    extras["well_formed_rate"] = [got.well_formed / n if n else None, rate_se(got.well_formed, n) if n else None]
    return got.items, extras


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
