"""Canonical output spaces: the finite set of answer strings Y and its target mass P_Y.

For a law P, ``decimals`` d and a cap ``max_bins``:

* continuous laws: ``lower = ppf(0.001)``, ``upper = ppf(0.999)``, intersected with the
  support; the lattice of step 10^-d between them, bounds included and computed exactly
  (a bound within floating-point noise of a lattice point, max(1e-9, 1e-12 |k|) steps
  for k steps from 0, is that point: 19.96043 * 1e5 is 1996042.9999999998), thinned to ``max_bins`` evenly spaced lattice
  points when longer; strings ``f"{x:.{d}f}"``;
* integer laws: the support, cut to ``[floor(ppf(0.001)), ceil(ppf(0.999))]`` on each
  unbounded side, never thinned (every valid integer answer keeps its mass); a degenerate
  law (geometric p=1) has a one-point space; strings are plain integers.

A law whose range cannot be written on the lattice (more than ``MAX_STEPS`` steps from 0,
or more than ``MAX_INTEGERS`` integer values) raises ``InvalidParametersError`` naming its
parameters.

Bin edges are the midpoints between consecutive points, closed by ``lower`` and
``upper`` (``lo - 1/2`` and ``hi + 1/2`` for integers); a point's mass is the law's mass
between its edges, and **both** tail masses fold into the edge points. The masses sum
to 1 within 1e-12.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from calbench.families import InvalidParametersError, Target, ppf

TAIL = 0.001
DEFAULT_DECIMALS = 5
EVAL_MAX_BINS = 1001  # soft target and evaluation references
HARD_MAX_BINS = 16384  # hard (sampled) target
MAX_STEPS = 2**53  # lattice indices stay exact integers in floating point below this
MAX_INTEGERS = 10**6  # integer values of one space (the largest grid point has 2,429)
SNAP, SNAP_REL = 1e-9, 1e-12  # a bound this close to a lattice point (in steps; relative) is on it


@dataclass(frozen=True)
class Space:
    """Canonical strings, their numeric values and target masses, in increasing order."""

    strings: tuple[str, ...]
    values: np.ndarray
    masses: np.ndarray
    decimals: int
    max_bins: int

    def __len__(self) -> int:
        return len(self.strings)


def format_lattice(k: np.ndarray | int, decimals: int) -> list[str]:
    """Exact decimal strings of ``k * 10**-decimals`` for integers ``k`` (no float rounding)."""
    ks = np.atleast_1d(k)
    if ks.dtype == np.int64 and ks.size >= 64 and np.abs(ks).max() < 10**18:
        return _format_many(ks, decimals)
    if decimals == 0:
        return [str(ki) for ki in ks.tolist()]
    scale = 10**decimals
    out = []
    for ki in ks.tolist():
        whole, frac = divmod(abs(ki), scale)
        out.append(f"{'-' if ki < 0 else ''}{whole}.{frac:0{decimals}d}")
    return out


def _format_many(ks: np.ndarray, decimals: int) -> list[str]:
    """format_lattice for an int64 array with |k| < 10**18, as one byte matrix.

    Each row is the sign (or a blank), the integer digits with leading zeros blanked,
    the point and the fraction digits, then a line break; removing the blanks and
    splitting the lines gives the strings.
    """
    mag = np.abs(ks)
    width = max(len(str(int(mag.max()))), decimals + 1)
    digits = (mag[:, None] // 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)) % 10 + ord("0")
    whole = mag // 10**decimals
    n_int = np.ones(ks.size, dtype=np.int64)  # digits of the integer part
    for p in range(1, width - decimals):
        n_int += whole >= 10**p
    digits[np.arange(width)[None, :] < (width - decimals - n_int)[:, None]] = ord(" ")
    columns = [np.where(ks < 0, ord("-"), ord(" "))[:, None], digits[:, : width - decimals]]
    if decimals:
        columns += [np.full((ks.size, 1), ord(".")), digits[:, width - decimals :]]
    columns.append(np.full((ks.size, 1), ord("\n")))
    text = np.concatenate(columns, axis=1).astype(np.uint8).tobytes().decode("ascii")
    return text.replace(" ", "").split("\n")[:-1]


def _lattice(lo_k: int, hi_k: int, max_bins: int) -> np.ndarray:
    """Integers lo_k..hi_k, or ``max_bins`` of them evenly spaced (ends included)."""
    size = hi_k - lo_k + 1
    if size <= max_bins:
        return np.arange(lo_k, hi_k + 1, dtype=np.int64)
    return lo_k + np.linspace(0, size - 1, max_bins).astype(np.int64)


def _lattice_bound(x: float, scale: int, up: bool) -> int:
    """ceil(x * scale) (``up``) or floor(x * scale), with a bound on a lattice point kept exactly."""
    k = x * scale
    nearest = round(k)
    if abs(k - nearest) <= max(SNAP, SNAP_REL * abs(k)):
        return int(nearest)
    return math.ceil(k) if up else math.floor(k)


def _too_wide(target: Target, why: str) -> InvalidParametersError:
    return InvalidParametersError(f"{target.key}: these parameters are too extreme for a canonical space ({why})")


def _mass_between(law: object, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(a < X <= b), from the CDF below the median and the survival function above it."""
    fa, fb = law.cdf(a), law.cdf(b)  # type: ignore[attr-defined]
    upper = fa > 0.5
    out = fb - fa
    out[upper] = law.sf(a[upper]) - law.sf(b[upper])  # type: ignore[attr-defined]
    return np.clip(out, 0.0, None)


def _bounds(target: Target, law: Any, decimals: int) -> tuple[float, float, int, int]:
    """(lower, upper, first, last) of ``target``'s space under ``law``: the outer bin edges and the
    first and last point (integers: values; continuous laws: lattice indices, steps of 10^-decimals
    from 0). A law whose range cannot be written raises ``InvalidParametersError`` naming it."""
    s_lo, s_hi = (float(v) for v in law.support())
    q_lo, q_hi = (float(v) for v in ppf(law, [TAIL, 1 - TAIL]))
    if not (math.isfinite(q_lo) and math.isfinite(q_hi)):
        raise _too_wide(target, f"its 0.1% and 99.9% quantiles are {q_lo:g} and {q_hi:g}")
    if target.integer:
        lo = int(s_lo) if math.isfinite(s_lo) else math.floor(q_lo)
        hi = int(s_hi) if math.isfinite(s_hi) else math.ceil(q_hi)
        hi = max(hi, lo)  # a degenerate law: one point
        if hi - lo + 1 > MAX_INTEGERS:
            raise _too_wide(target, f"{hi - lo + 1} integer values between {lo} and {hi}, more than {MAX_INTEGERS}")
        return lo - 0.5, hi + 0.5, lo, hi
    lower, upper = max(q_lo, s_lo), min(q_hi, s_hi)
    scale = 10**decimals
    if max(abs(lower), abs(upper)) * scale >= MAX_STEPS:
        raise _too_wide(target, f"its 99.9% range [{lower:g}, {upper:g}] lies beyond 2^53 steps of 10^-{decimals}")
    lo_k, hi_k = _lattice_bound(lower, scale, up=True), _lattice_bound(upper, scale, up=False)
    if lo_k > hi_k:  # the whole range is narrower than one lattice step
        lo_k = hi_k = round((lower + upper) / 2 * scale)
        if not s_lo <= lo_k / scale <= s_hi:
            raise InvalidParametersError(
                f"{target.key}: no number with {decimals} decimals lies in the support; use more decimals"
            )
    return lower, upper, lo_k, hi_k


def check_space(target: Target, decimals: int = DEFAULT_DECIMALS) -> None:
    """Raise ``InvalidParametersError`` (naming the law and why) where ``canonical_space(target,
    decimals)`` would: the checks alone, on a law built for them and dropped (a target keeps
    no law it did not need: a training run draws tens of thousands)."""
    _bounds(target, target.fresh_law(), decimals)


def canonical_space(target: Target, decimals: int = DEFAULT_DECIMALS, max_bins: int = EVAL_MAX_BINS) -> Space:
    """The canonical output space of ``target`` (see the module docstring)."""
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    if max_bins < 1:
        raise ValueError(f"max_bins must be >= 1, got {max_bins}")
    law = target.law
    lower, upper, first, last = _bounds(target, law, decimals)
    if target.integer:
        ks = np.arange(first, last + 1, dtype=np.int64)  # integer supports are never thinned
        values = ks.astype(float)
        strings = [str(k) for k in ks.tolist()]
    else:
        ks = _lattice(first, last, max_bins)
        values = ks / 10**decimals
        strings = format_lattice(ks, decimals)
    edges = np.concatenate([[lower], (values[1:] + values[:-1]) / 2, [upper]])
    if target.integer:  # F(k + 1/2) = F(k), and scipy's hypergeometric CDF is NaN off the integers
        edges = np.floor(edges)
    with np.errstate(divide="ignore"):  # log(1 - p) = -inf for a degenerate law is exact
        masses = _mass_between(law, edges[:-1], edges[1:])
        masses[0] += float(law.cdf(edges[0]))
        masses[-1] += float(law.sf(edges[-1]))
    masses = masses / masses.sum()
    return Space(tuple(strings), values, masses, decimals, max_bins)
