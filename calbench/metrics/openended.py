"""Open-ended random generation: does calibration carry over beyond numbers?

102 prompts "<verb> a random <category>. Output ONLY the answer.", the verbs cycling
Think of / Choose / Name / Pick over the categories. Two views of the model's randomness:

* from its next-token distribution at the first answer token (``calbench-hf`` returns
  it): the top-p support size, the smallest number of vocabulary tokens whose
  probabilities sum to at least p (headline p = 0.9; also 0.5, 0.95, 0.99);
* from N samples per prompt on any backend: distinct answers after whitespace and case
  folding, the entropy of the answers (bits), and the most frequent answer's share.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from calbench.parse import strip_think

VERBS = ("Think of", "Choose", "Name", "Pick")
CATEGORIES = (
    "word", "first name", "city", "country", "animal", "food", "job", "hobby", "sport", "color",
    "flower", "tree", "disease", "medicine", "body part", "musical instrument", "book title",
    "movie title", "historical figure", "fictional character", "vegetable", "fruit", "bird", "fish",
    "mammal", "reptile", "insect", "sea creature", "language", "nationality", "mountain", "river",
    "lake", "island", "planet", "constellation", "chemical element", "gemstone", "metal",
    "household object", "kitchen tool", "piece of clothing", "shoe type", "hat style", "vehicle",
    "car brand", "musical genre", "song title", "band name", "composer", "actor", "actress",
    "director", "painter", "sculptor", "architect", "philosopher", "scientist", "mathematician",
    "inventor", "academic subject", "school supply", "weather condition", "season", "month",
    "weekday", "holiday", "board game", "video game", "toy", "cartoon character", "superhero",
    "mythological figure", "fairy-tale character", "dinosaur", "dog breed", "cat breed",
    "farm animal", "wild animal", "snack", "dessert", "drink", "spice", "herb", "restaurant dish",
    "disease symptom", "medical specialty", "hospital department", "medicine brand", "vitamin",
    "bone", "muscle", "organ", "facial feature", "surname", "baby name for a girl",
    "baby name for a boy", "capital city", "UNESCO world heritage site", "famous landmark",
    "religion", "programming language",
)  # fmt: skip
SUPPORT_LEVELS = (0.5, 0.9, 0.95, 0.99)


def prompts() -> list[str]:
    return [f"{VERBS[i % len(VERBS)]} a random {c}. Output ONLY the answer." for i, c in enumerate(CATEGORIES)]


def support_size(probs: np.ndarray, p: float) -> int:
    """Smallest k such that the k largest probabilities sum to at least p."""
    ranked = np.sort(np.asarray(probs, dtype=np.float64))[::-1]
    return int(np.searchsorted(np.cumsum(ranked), p * ranked.sum() - 1e-12) + 1)


def support_sizes(probs: np.ndarray, levels: Sequence[float] = SUPPORT_LEVELS) -> dict[float, int]:
    return {p: support_size(probs, p) for p in levels}


_QUOTES = {('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"), ("*", "*"), ("`", "`")}  # noqa: RUF001


def normalize(answer: str) -> str:
    """The answer compared across samples: first non-empty line, whitespace collapsed,
    one pair of matching quotes removed, case folded; "" if nothing remains."""
    lines = [line.strip() for line in strip_think(answer).splitlines() if line.strip()]
    if not lines:
        return ""
    text = re.sub(r"\s+", " ", lines[0])
    if len(text) >= 2 and (text[0], text[-1]) in _QUOTES:
        text = text[1:-1].strip()
    return text.casefold()


def sample_stats(answers: Sequence[str]) -> dict[str, float]:
    """Distinct answers, answer entropy (bits) and the top answer's share, over non-empty answers."""
    counts = Counter(a for a in (normalize(x) for x in answers) if a)
    n = sum(counts.values())
    if n == 0:
        return {"unique_answers": 0.0, "answer_entropy": 0.0, "top_answer_share": math.nan}
    p = np.array(list(counts.values()), dtype=float) / n
    return {
        "unique_answers": float(len(counts)),
        "answer_entropy": float(-(p * np.log2(p)).sum()),
        "top_answer_share": float(p.max()),
    }
