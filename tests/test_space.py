"""Canonical output spaces: known values, lattice formatting, and properties under random laws."""

from __future__ import annotations

import itertools
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from calbench.families import make_target
from calbench.parse import in_support
from calbench.space import canonical_space, format_lattice


def test_gaussian_known_values() -> None:
    # Gaussian(3.5, 3): ppf(0.001) = 3.5 - 3 * 3.090232 = -5.770697, first lattice point above it.
    space = canonical_space(make_target("gaussian", {"mu": 3.5, "sigma": 3}))
    assert len(space) == 1001
    assert space.strings[0] == "-5.77069"
    assert space.strings[-1] == "12.77069"
    assert space.decimals == 5 and space.max_bins == 1001
    # Thinning ~1.85M lattice points to 1001 truncates indices, so the mirror image is close, not exact.
    np.testing.assert_allclose(space.masses, space.masses[::-1], rtol=1e-3)


def test_cauchy_known_values() -> None:
    space = canonical_space(make_target("cauchy", {"x0": 3.5, "gamma": 3}))
    assert (space.strings[0], space.strings[-1]) == ("-951.42651", "958.42651")
    assert len(space) == 1001
    # 1001 bins over ~1910 units: each bin ~1.9 wide, so the central one holds ~20% of the mass.
    assert space.masses.max() == pytest.approx(0.196, abs=1e-3)
    assert abs(space.values[np.argmax(space.masses)] - 3.5) < 1.0
    # Heavy tails: each folded end carries the 0.1% beyond ppf(0.001) / ppf(0.999) and more.
    assert space.masses[0] > 0.001 and space.masses[-1] > 0.001


def test_skellam_folds_both_tails() -> None:
    target = make_target("skellam", {"mu1": 10.5, "mu2": 10.5})
    space = canonical_space(target)
    assert space.strings == tuple(str(k) for k in range(-14, 15))
    # The paper folded only the upper tail, making this symmetric law lopsided.
    assert abs(space.masses[0] - space.masses[-1]) <= 1e-12
    np.testing.assert_allclose(space.masses, space.masses[::-1], rtol=0, atol=1e-12)
    assert space.masses[0] == pytest.approx(target.law.cdf(-14), rel=1e-9)
    assert space.masses[0] > target.law.pmf(-14) * 1.5  # the fold adds P(X < -14), not nothing
    np.testing.assert_allclose(space.masses[1:-1], target.law.pmf(np.arange(-13, 14)), rtol=1e-9)


def test_binomial_is_its_pmf() -> None:
    target = make_target("binomial", {"n": 25, "p": 0.5})
    space = canonical_space(target)
    assert space.strings == tuple(str(k) for k in range(26))
    pmf = target.law.pmf(np.arange(26))
    np.testing.assert_allclose(space.masses[1:-1], pmf[1:-1], rtol=1e-9)
    # A bounded support leaves nothing to fold: the ends are the pmf too.
    assert space.masses[0] == pytest.approx(target.law.cdf(0), rel=1e-9)
    assert space.masses[-1] == pytest.approx(target.law.sf(24), rel=1e-9)
    np.testing.assert_allclose(space.masses, pmf, rtol=1e-9)


def test_integer_space_ignores_decimals() -> None:
    target = make_target("poisson", {"lambda": 4})
    assert canonical_space(target, decimals=0).strings == canonical_space(target, decimals=5).strings
    assert canonical_space(target).strings[0] == "0"  # bounded below: no truncation at ppf(0.001)


def test_max_bins_thins_evenly_and_keeps_the_ends() -> None:
    target = make_target("uniform", {"a": 0, "b": 1})
    full = canonical_space(target, decimals=3, max_bins=10**6)
    thin = canonical_space(target, decimals=3, max_bins=11)
    assert (full.strings[0], full.strings[-1]) == ("0.001", "0.999")  # ppf(0.001), ppf(0.999)
    assert len(full) == 999
    assert len(thin) == 11
    assert (thin.strings[0], thin.strings[-1]) == (full.strings[0], full.strings[-1])
    assert set(thin.strings) <= set(full.strings)  # thinning keeps lattice points
    # Uniform law, evenly spaced points (up to integer truncation of the spacing): equal interior masses.
    np.testing.assert_allclose(thin.masses[1:-1], 0.1, rtol=1e-2)


@pytest.mark.parametrize(
    ("k", "decimals", "expected"),
    [
        (0, 5, "0.00000"),
        (0, 0, "0"),
        (-5, 3, "-0.005"),  # |k| < 10**d: the leading "0." must still be there, with the sign
        (-12345, 5, "-0.12345"),
        (12345, 5, "0.12345"),
        (100000, 5, "1.00000"),
        (-100001, 5, "-1.00001"),
        (7, 0, "7"),
        (-7, 0, "-7"),
        (-123, 0, "-123"),
        (1, 1, "0.1"),
        (2**53 + 1, 0, "9007199254740993"),  # past float precision: must stay exact
        (-(10**17) - 3, 2, "-1000000000000000.03"),
    ],
)
def test_format_lattice(k: int, decimals: int, expected: str) -> None:
    assert format_lattice(k, decimals) == [expected]


def test_format_lattice_array() -> None:
    assert format_lattice(np.array([-1, 0, 1], dtype=np.int64), 2) == ["-0.01", "0.00", "0.01"]


@settings(max_examples=50, deadline=None)
@given(k=st.integers(-(10**18), 10**18), decimals=st.integers(0, 8))
def test_format_lattice_is_exact(k: int, decimals: int) -> None:
    # Oracle: exact decimal arithmetic; k / 10**d in floats goes wrong once k passes 2**53.
    expected = f"{Decimal(k).scaleb(-decimals):.{decimals}f}"
    assert format_lattice(k, decimals) == [expected]


@st.composite
def laws(draw: st.DrawFn) -> tuple[str, dict[str, float]]:
    location = draw(st.floats(-100, 100))
    scale = draw(st.floats(0.01, 100))
    if draw(st.booleans()):
        return "gaussian", {"mu": location, "sigma": scale}
    return "uniform", {"a": location, "b": location + scale}


@settings(max_examples=40, deadline=None)
@given(law=laws(), decimals=st.integers(0, 5), max_bins=st.integers(1, 3000))
def test_space_properties(law: tuple[str, dict[str, float]], decimals: int, max_bins: int) -> None:
    try:
        space = canonical_space(make_target(*law), decimals, max_bins)
    except ValueError as err:  # a law narrower than one step with no lattice point in its support
        assert "no number with" in str(err)
        assume(False)
    assert 1 <= len(space) <= max_bins
    assert len(set(space.strings)) == len(space)
    exact = [Decimal(s) for s in space.strings]
    assert all(a < b for a, b in itertools.pairwise(exact))
    assert all(s == f"{d:.{decimals}f}" for s, d in zip(space.strings, exact, strict=True))
    np.testing.assert_allclose(space.values, [float(d) for d in exact], rtol=0, atol=1e-9)
    assert np.all(space.masses >= 0)
    assert abs(space.masses.sum() - 1) <= 1e-12


def test_space_narrower_than_one_step_stays_in_the_support() -> None:
    # No integer lies in [0.1, 0.2]: refuse rather than return a string outside the support.
    with pytest.raises(ValueError, match="no number with 0 decimals"):
        canonical_space(make_target("uniform", {"a": 0.1, "b": 0.2}), decimals=0)
    # One decimal is enough: the single point 0.2 (the range [0.1001, 0.1999] holds no lattice point).
    space = canonical_space(make_target("uniform", {"a": 0.1, "b": 0.2}), decimals=1)
    assert all(in_support(float(s), make_target("uniform", {"a": 0.1, "b": 0.2})) for s in space.strings)


@pytest.mark.parametrize(("decimals", "max_bins"), [(-1, 1001), (5, 0), (5, -3)])
def test_bad_arguments(decimals: int, max_bins: int) -> None:
    target = make_target("gaussian", {"mu": 0, "sigma": 1})
    with pytest.raises(ValueError, match="decimals" if decimals < 0 else "max_bins"):
        canonical_space(target, decimals, max_bins)


@settings(max_examples=50, deadline=None)
@given(
    ks=st.lists(st.integers(-(10**18) + 1, 10**18 - 1), min_size=64, max_size=200),
    small=st.integers(-(10**6), 10**6),
    decimals=st.integers(0, 8),
)
def test_format_lattice_arrays_are_exact(ks: list[int], small: int, decimals: int) -> None:
    # Long int64 arrays take a vectorised path; it must agree with exact decimal arithmetic.
    ks = [*ks, small, 0, -1, 10**decimals]
    got = format_lattice(np.array(ks, dtype=np.int64), decimals)
    assert got == [f"{Decimal(k).scaleb(-decimals):.{decimals}f}" for k in ks]
