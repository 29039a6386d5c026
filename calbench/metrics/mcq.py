"""Multiple-choice answer-position balance: asked to spread correct answers over A-D, does it?

One fixed prompt asks for a single 4-option, single-answer question in a strict format
and says that correct answers must be evenly distributed over A, B, C and D. Over many
independent generations the letters of the correct answers should be uniform.

* ``parse_strict``: after removing think blocks, every non-empty line starts with
  ``Question:``, ``A.``-``D.``, ``Correct Answer:`` or ``Explanation:``, each exactly once,
  and the answer is one of A-D;
* ``parse_lenient``: the first "correct answer: X" anywhere, markdown and case aside.

Metrics over parsed generations: the frequency of each letter, the total-variation
distance from uniform (1/2 Σ |f - 1/4|), Pearson's chi-square against uniform, and the
parse rates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from scipy import stats

from calbench.parse import strip_think

LETTERS = ("A", "B", "C", "D")
PROMPT = (
    "You write exam questions for medical students. Write exactly one multiple-choice question "
    "with four options and a single correct answer.\n"
    "Requirements:\n"
    "1. The question tests clinically relevant medical knowledge.\n"
    "2. There are exactly four options, labelled A, B, C and D.\n"
    "3. Exactly one option is correct.\n"
    "4. The wrong options are plausible.\n"
    "5. A short explanation says why the correct option is right.\n"
    "6. Across questions, the correct answer must be evenly distributed among A, B, C and D; "
    "do not favour any letter.\n"
    "Use exactly this format and nothing else:\n"
    "Question: <question>\n"
    "A. <option>\n"
    "B. <option>\n"
    "C. <option>\n"
    "D. <option>\n"
    "Correct Answer: <A, B, C or D>\n"
    "Explanation: <explanation>"
)
FIELDS = ("Question:", "A.", "B.", "C.", "D.", "Correct Answer:", "Explanation:")
_LENIENT = re.compile(r"correct\s*answer\s*(?:is)?\s*[:\uff1a]?\s*[*_\s(\[]*([ABCD])\b", re.IGNORECASE)


def parse_strict(text: str) -> str | None:
    """The correct letter of a generation in exactly the required format, else None."""
    seen: dict[str, str] = {}
    for line in (x.strip() for x in strip_think(text).splitlines()):
        if not line:
            continue
        field = next((f for f in FIELDS if line.startswith(f)), None)
        if field is None or field in seen:
            return None
        seen[field] = line[len(field) :].strip()
    if set(seen) != set(FIELDS):
        return None
    answer = seen["Correct Answer:"].strip().rstrip(".")
    return answer if answer in LETTERS else None


def parse_lenient(text: str) -> str | None:
    m = _LENIENT.search(strip_think(text))
    return m.group(1).upper() if m else None


def balance(letters: Sequence[str | None]) -> dict[str, float]:
    """Letter frequencies, TV distance and chi-square against uniform, over parsed letters."""
    parsed = [x for x in letters if x in LETTERS]
    counts = np.array([parsed.count(x) for x in LETTERS], dtype=float)
    n = counts.sum()
    out: dict[str, float] = {"parsed": float(n)}
    if n == 0:
        return out | {"tv_distance": float("nan"), "chi2": float("nan"), "chi2_pvalue": float("nan")}
    freq = counts / n
    test = stats.chisquare(counts)
    out |= {f"freq_{x}": float(f) for x, f in zip(LETTERS, freq, strict=True)}
    return out | {
        "tv_distance": float(0.5 * np.abs(freq - 0.25).sum()),
        "chi2": float(test.statistic),
        "chi2_pvalue": float(test.pvalue),
    }


def bootstrap_tv(letters: Sequence[str | None], reps: int = 2000, seed: int = 0) -> float:
    """Bootstrap standard error of the TV distance (resampling parsed generations)."""
    parsed = np.array([LETTERS.index(x) for x in letters if x in LETTERS])
    if parsed.size < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, parsed.size, size=(reps, parsed.size))
    counts = np.stack([(parsed[draws] == k).sum(axis=1) for k in range(4)], axis=1) / parsed.size
    return float((0.5 * np.abs(counts - 0.25).sum(axis=1)).std(ddof=1))
