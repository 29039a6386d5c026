"""The families table: one generic battery over all 30 rows, the splits, the prompts, the errors.

Modelled on scipy's ``distcont`` + ``test_continuous_basic.py``: the rows are data, and every
row must pass the same checks. A new family needs no new test, only a row.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from calbench.families import FAMILIES, Family, InvalidParametersError, Target, make_target, ppf, split_points
from calbench.metrics.sampling import midpoint_quantiles
from calbench.parse import in_support, parse_number
from calbench.prompt import prompt_text, read_prompt
from calbench.space import canonical_space

# (decimals, max_bins): the defaults (soft target, evaluation), a coarse lattice, the hard target.
SPACE_SETTINGS = [(5, 1001), (2, 1001), (5, 16384)]

# How a prompt reaches read_prompt in lm-eval: inside a chat template, with text on both sides.
CHAT_WRAPPERS = [
    "{}",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
]

PROMPT_RE = re.compile(
    r"Generate exactly ONE random number from (a|an) (.+) distribution with parameters (.+)\. Output ONLY the number\."
)


def sample_points(family: Family) -> list[Target]:
    """Selected points plus the first, middle and last point of every grid.

    Grid ends are the extreme parameters (widest tails, points nearest a support edge), so
    they are where canonical spaces break; checking all 2,671 points would take minutes.
    """
    points = family.selected_points()
    for split in family.grids:
        grid = family.points(split)
        points += [grid[0], grid[len(grid) // 2], grid[-1]]
    return points


def check_law(target: Target) -> None:
    law = target.law
    # Cauchy has no mean, so "finite mean or median".
    assert math.isfinite(law.mean()) or math.isfinite(law.median()), target.key
    qs = law.ppf(np.linspace(0.001, 0.999, 41))
    assert np.all(np.isfinite(qs)), target.key
    cdf = law.cdf(qs)
    assert np.all((cdf >= 0) & (cdf <= 1)), target.key
    assert np.all(np.diff(cdf) >= 0), f"{target.key}: cdf not monotone"


def check_space(target: Target, decimals: int, max_bins: int) -> None:
    space = canonical_space(target, decimals, max_bins)
    where = f"{target.key} decimals={decimals} max_bins={max_bins}"
    strings, masses, law = space.strings, space.masses, target.law
    assert 1 <= len(space) <= max_bins, where
    assert len(set(strings)) == len(strings), f"{where}: duplicated strings"

    # One regex over the joined strings: per-string checks on 16,384 strings x 30 families are slow.
    integer = r"-?(?:0|[1-9]\d*)"  # no leading zeros, no "+", no exponent
    pattern = integer if target.integer else rf"{integer}\.\d{{{decimals}}}"
    joined = "\n".join(strings)
    assert re.fullmatch(rf"(?:{pattern}\n)*{pattern}", joined), f"{where}: badly formatted strings"
    # The lattice formatter must never print "-0.00" (float formatting does, for tiny negatives).
    assert not re.search(r"(?m)^-0(\.0*)?$", joined), f"{where}: negative zero"

    numbers = np.array(strings, dtype=float)
    assert np.all(np.diff(numbers) > 0), f"{where}: strings not increasing in value"
    np.testing.assert_allclose(space.values, numbers, rtol=0, atol=1e-9)
    # The strings are sorted and the supports are intervals (integer ones contiguous), so
    # checking both ends plus a spread of interior strings covers the whole space.
    for s in strings[:: max(1, len(strings) // 50)] + strings[-1:]:
        value = parse_number(s)
        assert value is not None and value == float(s), f"{where}: {s!r} does not parse back"
        assert in_support(value, target), f"{where}: {s!r} is outside the support {target.support()}"

    assert np.all(masses >= 0), where
    assert abs(masses.sum() - 1) <= 1e-12, f"{where}: masses sum to {masses.sum()!r}"
    if len(space) == 1:
        return
    # Both tails fold into the edge points: the first point carries everything up to its right
    # bin edge, the last everything from its left edge on (Skellam's lower tail was the paper's bug).
    v = space.values
    if target.integer:
        first, last = law.cdf(v[0]), law.sf(v[-1] - 1)  # P(X <= lo), P(X >= hi)
    else:
        first, last = law.cdf((v[0] + v[1]) / 2), law.sf((v[-2] + v[-1]) / 2)
    assert masses[0] >= law.cdf(v[0]) * (1 - 1e-9), f"{where}: lower tail lost"
    assert masses[-1] >= law.sf(v[-1]) * (1 - 1e-9), f"{where}: upper tail lost"
    assert masses[0] == pytest.approx(first, rel=1e-9, abs=1e-13), f"{where}: lower tail not folded"
    assert masses[-1] == pytest.approx(last, rel=1e-9, abs=1e-13), f"{where}: upper tail not folded"


def check_prompt(target: Target) -> None:
    text = prompt_text(target)
    match = PROMPT_RE.fullmatch(text)
    assert match, text
    assert match.group(2) == target.family.display
    for wrapper in CHAT_WRAPPERS:
        back = read_prompt(wrapper.format(text))
        assert back == target, f"{target.key}: read back as {back.key}"
        assert back.items == target.items  # same values and same parameter order
        assert back.key == target.key


@pytest.mark.parametrize("family", FAMILIES.values(), ids=list(FAMILIES))
def test_family_row(family: Family) -> None:
    assert family.selected, "every family has selected evaluation points"
    for target in sample_points(family):
        assert target.family is family
        assert target.integer == (family.kind == "int")
        check_law(target)
        for decimals, max_bins in SPACE_SETTINGS:
            check_space(target, decimals, max_bins)
        check_prompt(target)


# ---- splits ------------------------------------------------------------------------------

TRAIN_FAMILIES = [f for f in FAMILIES if not FAMILIES[f].heldout]
HELDOUT_FAMILIES = ["bernoulli", "poisson", "weibull", "maxwell", "chi", "truncnorm"]


def test_family_names_and_split_membership() -> None:
    assert len(FAMILIES) == 30
    assert [f for f in FAMILIES if FAMILIES[f].heldout] == HELDOUT_FAMILIES
    assert len(TRAIN_FAMILIES) == 24
    for name, family in FAMILIES.items():
        assert family.name == name
        expected = {"heldout"} if family.heldout else {"train", "unseen"}
        assert set(family.grids) == expected, name


@pytest.mark.parametrize(("split", "size"), [("train", 1988), ("unseen", 591), ("heldout", 92)])
def test_split_sizes(split: str, size: int) -> None:
    points = split_points(split)  # type: ignore[arg-type]
    assert len(points) == size
    # Grid lengths are products of axis lengths; a rounding collision would still count here,
    # so check the rendered prompts are distinct too.
    prompts = [prompt_text(t) for t in points]
    assert len(set(prompts)) == size, f"duplicated prompts in {split}"


def test_selected_points() -> None:
    unseen = split_points("unseen", "selected")
    heldout = split_points("heldout", "selected")
    assert [t.family.name for t in unseen] == TRAIN_FAMILIES  # one per train family, table order
    assert len(heldout) == 18
    assert [t.family.name for t in heldout] == [f for f in HELDOUT_FAMILIES for _ in range(3)]
    assert len({t.key for t in heldout}) == 18
    # the training split's: one prompt per training family, the middle of its training grid
    probe = split_points("train", "selected")
    assert [t.family.name for t in probe] == TRAIN_FAMILIES
    for t in probe:
        grid = t.family.points("train")
        assert t == grid[len(grid) // 2]


def test_tiers() -> None:
    tiers = {
        1: {"uniform", "gaussian", "bernoulli"},
        2: {
            "beta",
            "binomial",
            "poisson",
            "exponential",
            "geometric",
            "negative_binomial",
            "lognormal",
            "triangular",
            "rayleigh",
            "maxwell",
            "truncnorm",
        },
    }
    tiers[3] = set(FAMILIES) - tiers[1] - tiers[2]
    assert len(tiers[3]) == 16
    for name, family in FAMILIES.items():
        assert name in tiers[family.tier], f"{name} is tier {family.tier}"


def test_integer_families() -> None:
    integer = {f for f in FAMILIES if FAMILIES[f].kind == "int"}
    assert integer == {
        "bernoulli",
        "binomial",
        "poisson",
        "geometric",
        "negative_binomial",
        "hypergeometric",
        "skellam",
        "beta_binomial",
    }
    assert {f.kind for f in FAMILIES.values()} == {"int", "cont"}


@pytest.mark.parametrize("name", TRAIN_FAMILIES)
def test_train_and_unseen_are_disjoint(name: str) -> None:
    # "Unseen parameters" means exactly that: no unseen point may appear in training.
    train = {t.key for t in FAMILIES[name].points("train")}
    unseen = {t.key for t in FAMILIES[name].points("unseen")}
    assert train and unseen
    assert not train & unseen


def test_selected_unseen_points_are_not_trained_on() -> None:
    train = {t.key for t in split_points("train")}
    assert not train & {t.key for t in split_points("unseen", "selected")}


def test_w1_quantiles_exist_for_unseen_skellam_points() -> None:
    # W1 needs F^-1((i - 1/2) / n) for every evaluated point; scipy's skellam.ppf gives
    # up on this unseen point, so calbench falls back to a search over the CDF.
    target = make_target("skellam", {"mu1": 8.5, "mu2": 12})
    assert target.key in {t.key for t in split_points("unseen")}
    q = midpoint_quantiles(target.law, 1000)
    assert np.all(np.isfinite(q)) and np.all(np.diff(q) >= 0)
    # Same quantiles as the definition min{k : F(k) >= u}, computed by brute force.
    ks = np.arange(-200, 200)
    cdf = target.law.cdf(ks)
    u = (np.arange(1000) + 0.5) / 1000
    np.testing.assert_array_equal(q, ks[np.searchsorted(cdf, u)])


# ---- prompt text -------------------------------------------------------------------------


def prompt_values(text: str) -> dict[str, str]:
    """The parameter values exactly as printed, parsed independently of calbench."""
    match = PROMPT_RE.fullmatch(text)
    assert match, text
    return dict(pair.split("=", 1) for pair in match.group(3).split(", "))


def significant_digits(text: str) -> int:
    """Significant digits of a printed number ("0.5743" -> 4, "120" -> 2, "10.25" -> 4)."""
    digits = text.lstrip("-").replace(".", "").lstrip("0")
    return len(digits if "." in text else digits.rstrip("0")) or 1


def test_significant_digits_helper() -> None:
    assert [significant_digits(t) for t in ["0.5743", "120", "10.25", "0", "-0.05", "3"]] == [4, 2, 4, 1, 1, 1]


def test_prompt_values_are_short_and_clean() -> None:
    # The law is built from the printed values, so the text must be what the law uses.
    for split in ("train", "unseen", "heldout"):
        for target in split_points(split):
            printed = prompt_values(prompt_text(target))
            assert list(printed) == list(target.family.param_names)
            for name, text in printed.items():
                value = target.params[name]
                assert re.fullmatch(r"-?\d+(\.\d*[1-9])?", text), f"{target.key}: {name}={text}"
                assert float(text) == value, f"{target.key}: {name}={text} but the law uses {value}"
                assert significant_digits(text) <= 4, f"{target.key}: {name}={text}"


def test_integer_valued_parameters_print_as_integers() -> None:
    target = make_target("gaussian", {"mu": 3.0, "sigma": 2.0})
    assert "mu=3, sigma=2." in prompt_text(target)
    assert ".0," not in prompt_text(make_target("binomial", {"n": 10.0, "p": 0.5}))
    assert "p=0.5" in prompt_text(make_target("binomial", {"n": 10.0, "p": 0.5}))


@pytest.mark.parametrize(
    ("family", "phrase"),
    [
        ("exponential", "from an Exponential distribution"),
        ("f_distribution", "from an F distribution"),
        ("inverse_gaussian", "from an Inverse Gaussian distribution"),
        ("uniform", "from a Uniform distribution"),
        ("gaussian", "from a Gaussian distribution"),
        ("student_t", "from a Student's t distribution"),
        ("beta_binomial", "from a Beta-Binomial distribution"),
        ("truncnorm", "from a Truncated Normal distribution"),
    ],
)
def test_articles(family: str, phrase: str) -> None:
    assert phrase in prompt_text(FAMILIES[family].selected_points()[0])


@pytest.mark.parametrize(
    ("family", "params", "expected"),
    [
        (
            "binomial",
            {"n": 25, "p": 0.5},
            "Generate exactly ONE random number from a Binomial distribution with parameters n=25, p=0.5. "
            "Output ONLY the number.",
        ),
        (
            "exponential",
            {"lambda": 7},
            "Generate exactly ONE random number from an Exponential distribution with parameters lambda=7. "
            "Output ONLY the number.",
        ),
        (
            "triangular",
            {"a": 2.5, "c": 6, "b": 9.5},
            "Generate exactly ONE random number from a Triangular distribution with parameters a=2.5, c=6, b=9.5. "
            "Output ONLY the number.",
        ),
        (
            "hypergeometric",
            {"M": 100, "K": 50, "N": 20},
            "Generate exactly ONE random number from a Hypergeometric distribution with parameters M=100, K=50, N=20. "
            "Output ONLY the number.",
        ),
        (
            "truncnorm",
            {"mu": 1, "sigma": 1.5, "lower": -1, "upper": 2},
            "Generate exactly ONE random number from a Truncated Normal distribution with parameters "
            "mu=1, sigma=1.5, lower=-1, upper=2. Output ONLY the number.",
        ),
    ],
)
def test_exact_prompts(family: str, params: dict[str, float], expected: str) -> None:
    assert prompt_text(make_target(family, params)) == expected


def test_grid_values_are_rounded_before_the_law_is_built() -> None:
    # geom(0.5, 2, 11)[1] = 0.574349...: the prompt says 0.5743 and the law must use 0.5743.
    target = FAMILIES["gaussian"].points("train")[1]
    assert target.params["sigma"] == 0.5743
    assert target.law.std() == pytest.approx(0.5743, rel=1e-12)


# ---- invalid parameters ------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")

# (family, parameters, the name the error must mention). Unknown families raise KeyError.
INVALID_PARAMS = [
    ("gaussian", {"mu": 0, "sigma": -1}, "sigma"),
    ("gaussian", {"mu": 0, "sigma": 0}, "sigma"),
    ("gaussian", {"mu": NAN, "sigma": 1}, "mu"),
    ("gaussian", {"mu": 0}, "sigma"),  # missing
    ("gaussian", {"mu": 0, "sigma": 1, "tau": 2}, "tau"),  # unknown
    ("gaussian", {"mu": "3", "sigma": 1}, "mu"),  # not a number
    ("exponential", {"lambda": INF}, "lambda"),
    ("cauchy", {"x0": -INF, "gamma": 1}, "x0"),
    ("binomial", {"n": 10, "p": 1.5}, "p"),
    ("binomial", {"n": 10, "p": -0.1}, "p"),
    ("binomial", {"n": 2.5, "p": 0.5}, "n"),
    ("binomial", {"n": -1, "p": 0.5}, "n"),
    ("binomial", {"n": True, "p": 0.5}, "n"),  # bool is an int subclass, not a count
    ("bernoulli", {"p": NAN}, "p"),
    ("geometric", {"p": 0}, "p"),
    ("negative_binomial", {"r": 0, "p": 0.5}, "r"),
    ("poisson", {"lambda": -2}, "lambda"),
    ("skellam", {"mu1": 1, "mu2": 0}, "mu2"),
    ("weibull", {"k": -1, "lambda": 1}, "k"),
    ("beta_binomial", {"n": 10.5, "alpha": 1, "beta": 1}, "n"),
    ("hypergeometric", {"M": 10, "K": 11, "N": 5}, "K"),
    ("hypergeometric", {"M": 10, "K": 5, "N": 11}, "N"),
    ("hypergeometric", {"M": 0, "K": 0, "N": 0}, "M"),
    ("uniform", {"a": 3, "b": 3}, "b"),
    ("uniform", {"a": 3, "b": 1}, "b"),
    ("triangular", {"a": 0, "c": 5, "b": 4}, "c"),
    ("triangular", {"a": 0, "c": -1, "b": 4}, "c"),
    ("triangular", {"a": 4, "c": 4, "b": 4}, "b"),
    ("truncnorm", {"mu": 0, "sigma": 1, "lower": 1, "upper": 1}, "upper"),
    ("truncnorm", {"mu": 0, "sigma": 1, "lower": 2, "upper": 1}, "upper"),
    ("gausian", {"mu": 0, "sigma": 1}, "gausian"),  # unknown family
]


@pytest.mark.parametrize(("family", "params", "offending"), INVALID_PARAMS)
def test_invalid_parameters(family: str, params: dict[str, float], offending: str) -> None:
    error = InvalidParametersError if family in FAMILIES else KeyError
    with pytest.raises(error) as info:
        make_target(family, params)
    # Checked once the call has raised, outside the block: the message names both.
    message = str(info.value)
    assert re.search(rf"(?<!\w){re.escape(family)}(?!\w)", message), message
    assert re.search(rf"(?<!\w){re.escape(offending)}(?!\w)", message), message


def test_valid_counterparts_of_the_invalid_rows_are_accepted() -> None:
    # The table's rows fail because of the one bad value, not because the rest is wrong.
    valid: list[tuple[str, dict[str, float]]] = [
        ("hypergeometric", {"M": 10, "K": 10, "N": 10}),
        ("triangular", {"a": 0, "c": 0, "b": 4}),
        ("bernoulli", {"p": 0}),
        ("geometric", {"p": 1}),
        ("binomial", {"n": 0, "p": 1}),
        ("beta_binomial", {"n": 10.0, "alpha": 1, "beta": 1}),
    ]
    for family, params in valid:
        assert make_target(family, params).family.name == family


@pytest.mark.parametrize(
    "family, params",
    [
        ("beta_binomial", {"n": 40, "alpha": 6.5, "beta": 6.5}),
        ("beta_binomial", {"n": 7, "alpha": 0.3, "beta": 2.5}),
        ("hypergeometric", {"M": 100, "K": 50, "N": 20}),
        ("hypergeometric", {"M": 31, "K": 25, "N": 18}),
    ],
)
def test_the_tabled_quantiles_are_scipys(family, params):
    """ppf's table for scipy's bisection laws gives scipy's answers, at the CDF's own values and
    next to them too (where the bisection's ties are decided)."""
    from calbench.laws import _ppf_on_a_table

    law = make_target(family, params).law
    ks = np.arange(*law.ppf([1e-6, 1 - 1e-6]))
    at_cdf = np.clip(law.cdf(ks), 1e-12, 1 - 1e-12)
    q = np.concatenate([(np.arange(200) + 0.5) / 200, at_cdf, np.nextafter(at_cdf, 0), np.nextafter(at_cdf, 1)])
    tabled = _ppf_on_a_table(law, q, *law.support())
    assert tabled is not None and np.array_equal(tabled, law.ppf(q))
    assert np.array_equal(ppf(law, q), tabled)
    skellam = make_target("skellam", {"mu1": 2, "mu2": 3}).law
    assert _ppf_on_a_table(skellam, q, *skellam.support()) is None  # left to scipy
