"""The strict answer parser.

An answer counts only if, once reasoning blocks and surrounding whitespace are removed,
the whole string is one decimal number. ``"3.5"``, ``"-2"``, ``".5"``, ``"3."``, ``"1e3"``
and ``"+2"`` parse; ``"The number is 3"``, ``"3.14."`` and ``"3, 4"`` do not. Nothing here
raises on any input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from calbench.families import Target

# ASCII digits only: Python's \d also matches Arabic-Indic and fullwidth digits, which float() accepts but no
# canonical answer string contains.
NUMBER_RE = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
# A closed block anywhere, then an unclosed block running to the end of the text.
_THINK_CLOSED = re.compile(r"<think>.*?</think>", re.DOTALL)
_THINK_OPEN = re.compile(r"<think>.*\Z", re.DOTALL)
INTEGER_TOLERANCE = 1e-9


def strip_think(text: str) -> str:
    """Remove ``<think>…</think>`` blocks, and an unclosed ``<think>…`` tail."""
    return _THINK_OPEN.sub("", _THINK_CLOSED.sub("", text))


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
