"""Canonical output spaces: known values, lattice formatting, and properties under random laws."""

from __future__ import annotations

import itertools
import re
import warnings
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from calbench.families import FAMILIES, InvalidParametersError, make_target
from calbench.parse import in_support
from calbench.space import EVAL_MAX_BINS, canonical_space, format_lattice


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


def _exact_upper_k(a: float, b: float, decimals: int) -> int:
    """floor(10^d * (a + 0.999 (b - a))) in exact decimal arithmetic (the prompt's values are decimals)."""
    upper = Decimal(repr(a)) + Decimal("0.999") * (Decimal(repr(b)) - Decimal(repr(a)))
    return int((upper.scaleb(decimals)).to_integral_value(rounding="ROUND_FLOOR"))


def _exact_lower_k(a: float, b: float, decimals: int) -> int:
    lower = Decimal(repr(a)) + Decimal("0.001") * (Decimal(repr(b)) - Decimal(repr(a)))
    return int((lower.scaleb(decimals)).to_integral_value(rounding="ROUND_CEILING"))


@pytest.mark.parametrize(
    ("a", "b", "decimals", "first", "last"),
    [(10.4, 19.97, 5, "10.40957", "19.96043"), (-5, -4, 3, "-4.999", "-4.001")],
)
def test_lattice_points_on_the_bounds_belong_to_the_space(
    a: float, b: float, decimals: int, first: str, last: str
) -> None:
    # 19.96043 * 1e5 is 1996042.9999999998 in floating point: the bound is a lattice point all the same.
    space = canonical_space(make_target("uniform", {"a": a, "b": b}), decimals=decimals, max_bins=10**6)
    assert (space.strings[0], space.strings[-1]) == (first, last)
    assert len(space) == _exact_upper_k(a, b, decimals) - _exact_lower_k(a, b, decimals) + 1


def test_uniform_grid_bounds_match_exact_decimal_arithmetic() -> None:
    # Every uniform grid point of every split, checked against Decimal (not the code's floats),
    # in the space evaluation builds: thinned to EVAL_MAX_BINS, its ends the exact lattice bounds.
    checked = 0
    for split in ("train", "unseen", "heldout"):
        for target in FAMILIES["uniform"].points(split):
            a, b = target.params["a"], target.params["b"]
            space = canonical_space(target)
            lo_k, hi_k = _exact_lower_k(a, b, 5), _exact_upper_k(a, b, 5)
            assert space.strings[0] == f"{Decimal(lo_k).scaleb(-5):.5f}", target.key
            assert space.strings[-1] == f"{Decimal(hi_k).scaleb(-5):.5f}", target.key
            assert len(space) == min(hi_k - lo_k + 1, EVAL_MAX_BINS), target.key
            checked += 1
    assert checked > 50


def test_a_thinned_lattice_keeps_both_exact_ends() -> None:
    space = canonical_space(make_target("uniform", {"a": 10.4, "b": 19.97}))  # 1001 of 955,087 points
    assert len(space) == 1001
    assert (space.strings[0], space.strings[-1]) == ("10.40957", "19.96043")


def test_a_degenerate_law_has_a_one_point_space() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's log(1 - p) = -inf must not leak as a warning
        space = canonical_space(make_target("geometric", {"p": 1}))
    assert space.strings == ("1",)
    np.testing.assert_array_equal(space.masses, [1.0])


def test_integer_supports_are_never_thinned() -> None:
    target = make_target("negative_binomial", {"r": 50, "p": 0.03})
    space = canonical_space(target, max_bins=1001)
    ks = np.arange(int(space.values[0]), int(space.values[-1]) + 1)
    assert len(space) == 2429 and space.strings == tuple(str(k) for k in ks)
    np.testing.assert_allclose(space.masses[1:-1], target.law.pmf(ks[1:-1]), rtol=1e-9)


@pytest.mark.parametrize(
    ("family", "params", "named"),
    [
        ("lognormal", {"mu": 800, "sigma": 1}, "lognormal(mu=800,sigma=1)"),
        ("pareto", {"alpha": 0.2, "xm": 1}, "pareto(alpha=0.2,xm=1)"),
        ("student_t", {"nu": 0.05}, "student_t(nu=0.05)"),
        ("f_distribution", {"d1": 0.2, "d2": 0.05}, "f_distribution(d1=0.2,d2=0.05)"),
    ],
)
def test_extreme_parameters_get_an_error_naming_them(family: str, params: dict[str, float], named: str) -> None:
    with pytest.raises(InvalidParametersError, match=re.escape(named) + ".*too extreme"):
        canonical_space(make_target(family, params))


def _triangular_quantile(a: Decimal, c: Decimal, b: Decimal, q: Decimal) -> Decimal:
    """The triangular law's quantile in exact decimal arithmetic (50 digits)."""
    if q < (c - a) / (b - a):
        return a + (q * (b - a) * (c - a)).sqrt()
    return b - ((1 - q) * (b - a) * (b - c)).sqrt()


def test_triangular_grid_bounds_match_exact_decimal_arithmetic() -> None:
    import decimal

    with decimal.localcontext(decimal.Context(prec=50)):
        for split in ("train", "unseen", "heldout"):
            for target in FAMILIES["triangular"].points(split):
                a, c, b = (Decimal(repr(target.params[k])) for k in ("a", "c", "b"))
                lo = _triangular_quantile(a, c, b, Decimal("0.001")).scaleb(5).to_integral_value("ROUND_CEILING")
                hi = _triangular_quantile(a, c, b, Decimal("0.999")).scaleb(5).to_integral_value("ROUND_FLOOR")
                space = canonical_space(target)  # thinned as evaluation builds it; its ends are exact
                assert (space.strings[0], space.strings[-1]) == (
                    f"{Decimal(lo).scaleb(-5):.5f}",
                    f"{Decimal(hi).scaleb(-5):.5f}",
                ), target.key
