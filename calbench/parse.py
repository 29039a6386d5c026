"""The strict answer parser.

An answer counts only if, once reasoning blocks and surrounding whitespace are removed,
the whole string is one decimal number. ``"3.5"``, ``"-2"``, ``".5"``, ``"3."``, ``"1e3"``
and ``"+2"`` parse; ``"The number is 3"``, ``"3.14."`` and ``"3, 4"`` do not. Nothing here
raises on any input, and every step is linear in the length of the text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calbench.families import Target

# ASCII digits only: Python's \d also matches Arabic-Indic and fullwidth digits, which float() accepts but no
# canonical answer string contains.
NUMBER_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
# An integer law accepts a parsed x when |x - round(x)| <= INTEGER_TOLERANCE and scores it as
# round(x): "12", "12.0" and "1.2e1" are 12; "12.5" is a support violation. The tolerance only
# absorbs decimal-to-binary rounding ("12.000000000001" is 12, "12.0001" is not).
INTEGER_TOLERANCE = 1e-9
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def strip_think(text: str) -> str:
    """Remove ``<think>…</think>`` blocks (each from an opening tag to the first closing tag after
    it), then everything from the first ``<think>`` left (an unclosed block runs to the end).

    Two linear passes with ``str.find``, so pathological input (thousands of unclosed tags)
    costs no more than its length."""
    kept, at = [], 0
    while (start := text.find(THINK_OPEN, at)) >= 0:
        end = text.find(THINK_CLOSE, start + len(THINK_OPEN))
        if end < 0:
            break  # no closing tag after this one, so none after any later opening tag either
        kept.append(text[at:start])
        at = end + len(THINK_CLOSE)
    kept.append(text[at:])
    joined = "".join(kept)
    cut = joined.find(THINK_OPEN)
    return joined if cut < 0 else joined[:cut]


def parse_number(text: str) -> float | None:
    """The number the answer consists of, or ``None`` when it is anything else."""
    if not isinstance(text, str):
        return None
    answer = strip_think(text).strip()
    if not NUMBER_RE.fullmatch(answer):
        return None
    try:
        return float(answer)
    except (OverflowError, ValueError):  # pragma: no cover - the regex admits only floats
        return None


@dataclass(frozen=True)
class Answer:
    """One response, classified against its target."""

    value: float | None  # the parsed number, None when unparseable
    valid: bool  # parsed, finite, inside the support, integral for integer laws

    @property
    def parsed(self) -> bool:
        return self.value is not None

    @property
    def support_violation(self) -> bool:
        """Parsed but not a possible outcome of the law."""
        return self.parsed and not self.valid


def in_support(value: float, target: Target) -> bool:
    if not math.isfinite(value):
        return False
    lo, hi = target.support()
    if target.integer and abs(value - round(value)) > INTEGER_TOLERANCE:
        return False
    return lo <= value <= hi


def classify(text: str, target: Target) -> Answer:
    value = parse_number(text)
    if value is None:
        return Answer(None, False)
    ok = in_support(value, target)
    return Answer(float(round(value)) if ok and target.integer else value, ok)
