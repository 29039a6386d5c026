"""The strict answer parser: what counts as a number, and what counts as valid."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calbench.families import make_target
from calbench.parse import Answer, classify, parse_number, strip_think
from tests.helpers import never_parses

BINOMIAL = make_target("binomial", {"n": 25, "p": 0.5})
EXPONENTIAL = make_target("exponential", {"lambda": 7})
GAUSSIAN = make_target("gaussian", {"mu": 3.5, "sigma": 3})
SKELLAM = make_target("skellam", {"mu1": 10.5, "mu2": 10.5})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3.5", 3.5),
        ("-2", -2.0),
        (".5", 0.5),
        ("3.", 3.0),
        ("1e3", 1000.0),
        ("+2", 2.0),
        ("  7\n", 7.0),
        ("-.5e-3", -0.0005),
        ("2E+2", 200.0),
        ("007", 7.0),
    ],
)
def test_accepted(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "The number is 3",
        "3.14.",
        "3, 4",
        "",
        "   ",
        "nan",
        "inf",
        "-inf",
        "Infinity",
        "0x10",
        "1_000",  # float() accepts underscores; the spec's regex does not
        "٣",  # Arabic-Indic three: float() accepts it, but it is no canonical answer string
        "\uff13",  # fullwidth three
        "3 4",
        "3e",
        "e3",
        ".",
        "-",
        "**3**",
        "3\n4",
        "1/2",
    ],
)
def test_rejected(text: str) -> None:
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("text", "stripped"),
    [
        ("<think>hmm, 7?</think>4", "4"),
        ("<think>a</think>\n\n 4 ", "\n\n 4 "),
        ("<think>a</think>1<think>b</think>", "1"),  # several closed blocks
        ("<think>\nmulti\nline\n</think>2.5", "2.5"),  # DOTALL: blocks span lines
        ("4<think>still thinking", "4"),  # unclosed block runs to the end
        ("<think>a</think>3<think>b", "3"),  # closed, then unclosed
        ("no blocks", "no blocks"),
    ],
)
def test_strip_think(text: str, stripped: str) -> None:
    assert strip_think(text) == stripped


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("<think>The mean is 10, so 12.</think>\n12", 12.0),
        ("<think>a</think>1<think>b</think>", 1.0),
        ("<think>only reasoning, never an answer", None),  # unclosed: nothing left to parse
        ("<think>a</think>", None),
        ("5</think>", None),  # a stray closing tag is not a think block
    ],
)
def test_parse_after_think(text: str, value: float | None) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("text", "target", "expected"),
    [
        ("3", BINOMIAL, Answer(3.0, True)),
        ("3.0", BINOMIAL, Answer(3.0, True)),  # integral value written as a decimal is fine
        ("2.5", BINOMIAL, Answer(2.5, False)),  # integer family: not integral
        ("26", BINOMIAL, Answer(26.0, False)),  # Binomial(25, .5) stops at 25
        ("-1", BINOMIAL, Answer(-1.0, False)),
        ("25", BINOMIAL, Answer(25.0, True)),
        ("-3", SKELLAM, Answer(-3.0, True)),  # signed integer support
        ("-0.5", EXPONENTIAL, Answer(-0.5, False)),  # negative for a positive law
        ("0.1234", EXPONENTIAL, Answer(0.1234, True)),
        ("-1e6", GAUSSIAN, Answer(-1e6, True)),  # unbounded support
        ("hello", GAUSSIAN, Answer(None, False)),
    ],
)
def test_classify(text: str, target: object, expected: Answer) -> None:
    answer = classify(text, target)  # type: ignore[arg-type]
    assert answer == expected
    assert answer.parsed == (expected.value is not None)
    assert answer.support_violation == (answer.parsed and not expected.valid)


def test_overflow_is_parsed_but_never_valid() -> None:
    # float("1e400") is inf: a number the model wrote, but no law has it as an outcome.
    answer = classify("1e400", GAUSSIAN)
    assert not answer.valid
    assert answer.support_violation
    assert classify("-1e400", EXPONENTIAL).valid is False
    assert classify("1e400", BINOMIAL).valid is False


def test_unparseable_is_not_a_support_violation() -> None:
    answer = classify("The number is 3", GAUSSIAN)
    assert not answer.parsed and not answer.valid and not answer.support_violation


# Fragments that steer random text towards the parser's edge cases (tags, signs, exponents).
FRAGMENTS = ["<think>", "</think>", "3", "0", ".", "e", "E", "-", "+", " ", "\n", "x", "٣", "\u00a0", "inf", "nan"]


@settings(max_examples=50, deadline=None)
@given(text=st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join)))
def test_never_raises(text: str) -> None:
    value = parse_number(text)
    assert value is None or isinstance(value, float)
    for target in (BINOMIAL, EXPONENTIAL, GAUSSIAN):
        answer = classify(text, target)
        assert answer.parsed == (value is not None)
        if answer.valid:  # valid means finite and inside the support
            assert answer.value is not None and math.isfinite(answer.value)
            lo, hi = target.support()
            assert lo <= answer.value <= hi


@settings(max_examples=50, deadline=None)
@given(
    text=st.from_regex(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    pad=st.sampled_from(["", " ", "\n", "\t "]),
)
def test_every_spec_number_parses(text: str, pad: str) -> None:
    # The spec's regex is the definition: anything it matches is accepted, as float() reads it.
    assert parse_number(pad + text + pad) == float(text)


@pytest.mark.parametrize(
    ("prefix", "never"),
    [
        ("The", True),
        (" 3x", True),
        ("3,", True),
        ("", False),
        ("  -1.5e", False),
        ("4 ", False),
        ("<think>so", False),
        ("\ufffd", False),
        ("7 <", False),
        ("a<think>", True),
    ],
)
def test_never_parses_examples(prefix, never):
    assert never_parses(prefix) is never


PIECES = ["<think>", "</think>", "<", "5", "-", ".", "e", " ", "\n", "\u00a0", "\ufffd", "x", "t"]


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=8).map("".join),
    st.lists(st.sampled_from(PIECES), max_size=8).map("".join),
)
def test_a_prefix_that_never_parses_has_no_continuation_that_parses(prefix, rest):
    if never_parses(prefix):
        assert parse_number(prefix + rest) is None
