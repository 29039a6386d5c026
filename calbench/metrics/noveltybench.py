"""NoveltyBench scoring: how many genuinely different answers, and how good, in k tries.

For each prompt, k generations are partitioned greedily into equivalence classes: each
generation joins the first class whose *first* member it is equivalent to, or opens a
new class. Two generations of at most 5 words each are equivalent when
2 x |shared lower-cased unigrams| >= the longer length; otherwise a similarity model
decides. ``distinct`` is the number of classes. Upstream fixed its summary script in May 2025
(commit db138f1): only its per-row ``distinct`` field (``max(partition)``) and summaries
written before that commit are one short. Each class's first member is rated 1-10 by a reward model (raw rewards mapped
through fixed thresholds), the other generations score 0, and

    utility = Σ_i p^i s_i / Σ_i p^i,  patience p = 0.8.

Full scoring needs two hub models (``yimingzhang/deberta-v3-large-generation-similarity``
at threshold 0.102, and ``Skywork/Skywork-Reward-Gemma-2-27B-v0.2``), which
``calbench.backends.noveltybench`` loads; everything here is pure. The **lite** scorer
needs none and gives ``distinct`` only: the short-answer rule, and otherwise
NoveltyBench's own model-free "unigram" criterion, ROUGE-1 F1 > 0.458. Lite numbers are
not NoveltyBench numbers; they are labelled ``distinct_lite``.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from calbench.stats import sample_mean

REWARD_THRESHOLDS = (-7.71875, -6.28125, -6.0, -5.71875, -5.5, -5.0, -4.375, -3.4375, -2.046875)
ROUGE_THRESHOLD = 0.458
PATIENCE = 0.8
HUB_DATASET = "yimingzhang/novelty-bench"  # splits "curated" (100) and "wildchat" (1000)

Equivalence = Callable[[str, str], bool]
Rater = Callable[[str, Sequence[str]], list[int]]  # a prompt and its generations -> ratings 1..10


def short_rule(a: str, b: str) -> bool | None:
    """Equivalence of two short answers (<= 5 words each); None when either is longer."""
    ua, ub = a.strip().lower().split(), b.strip().lower().split()
    longest = max(len(ua), len(ub))
    if longest > 5:
        return None
    return 2 * len(set(ua) & set(ub)) >= longest


def rouge1_f(a: str, b: str) -> float:
    """ROUGE-1 F1 with rouge-score's default tokenizer (lower-cased [a-z0-9]+ tokens, no stemming)."""
    ta, tb = Counter(re.findall(r"[a-z0-9]+", a.lower())), Counter(re.findall(r"[a-z0-9]+", b.lower()))
    overlap = sum((ta & tb).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(tb.values()), overlap / sum(ta.values())
    return 2 * precision * recall / (precision + recall)


def lite_equivalent(a: str, b: str) -> bool:
    rule = short_rule(a, b)
    return rule if rule is not None else rouge1_f(a, b) > ROUGE_THRESHOLD


def partition(responses: Sequence[str], equivalent: Equivalence) -> list[int]:
    """Class index of each response; classes numbered in order of first appearance."""
    labels = [-1] * len(responses)
    firsts: list[str] = []
    for i, response in enumerate(responses):
        if labels[i] >= 0:
            continue
        labels[i] = len(firsts)
        firsts.append(response)
        for j in range(i + 1, len(responses)):
            if labels[j] < 0 and equivalent(response, responses[j]):
                labels[j] = labels[i]
    return labels


def distinct(labels: Sequence[int]) -> int:
    """The number of equivalence classes (upstream's per-row ``distinct`` field, ``max(partition)``, is one short)."""
    return max(labels) + 1 if labels else 0


def rating(reward: float) -> int:
    """Raw reward-model score -> 1..10 through NoveltyBench's thresholds."""
    return bisect.bisect_left(REWARD_THRESHOLDS, reward) + 1


def utility(labels: Sequence[int], ratings: Sequence[int], patience: float = PATIENCE) -> float:
    """Σ p^i s_i / Σ p^i where s_i is the rating of a class's first member and 0 for repeats."""
    scores, seen = [], 0
    for label, r in zip(labels, ratings, strict=True):
        scores.append(r if label == seen else 0)
        seen += label == seen
    weights = patience ** np.arange(len(scores))
    return float(np.dot(scores, weights) / weights.sum())


def score_split(
    items: Sequence[dict[str, Any]],
    equivalent: Equivalence,
    rate: Rater | None = None,
    patience: float = PATIENCE,
) -> dict[str, Any]:
    """Per-prompt partitions (and utilities when ``rate`` is given), and the split's means ± SE."""
    rows = []
    for item in items:
        labels = partition(item["generations"], equivalent)
        row = {"id": item["id"], "partition": labels, "distinct": distinct(labels)}
        if rate is not None:
            row["utility"] = utility(labels, rate(item["prompt"], item["generations"]), patience)
        rows.append(row)
    summary: dict[str, Any] = {"prompts": len(rows)}
    for key in ("distinct", "utility"):
        values = [r[key] for r in rows if key in r]
        if values:
            mean = sample_mean(values, nan="propagate")
            summary[key] = {"mean": mean.value, "se": mean.se}
    return {"summary": summary, "prompts": rows}


def score_splits(
    items: Sequence[tuple[str, list[dict[str, Any]]]],
    equivalent: Equivalence = lite_equivalent,
    rate: Rater | None = None,
) -> dict[str, Any]:
    """Score each split's items (``calbench.lm_eval_io.noveltybench_items``): lite by default
    (``distinct_lite`` only), full NoveltyBench with the hub models' equivalence and ratings
    (``calbench.backends.noveltybench``: a ``rate`` makes it the full scorer)."""
    full = rate is not None
    splits: dict[str, Any] = {}
    for split, split_items in items:
        if split in splits:
            raise ValueError(f"two samples logs for the {split} split: pass one per split")
        scored = score_split(split_items, equivalent, rate)
        if not full:
            scored["summary"]["distinct_lite"] = scored["summary"].pop("distinct", None)
        splits[split] = scored
    return {"scorer": "full" if full else "lite", "splits": splits}


def summary_text(scored: dict[str, Any]) -> str:
    """What ``calbench noveltybench score`` prints: per split, the means ± standard errors."""
    full = scored["scorer"] == "full"
    label = "NoveltyBench (DeBERTa partition, Skywork reward)" if full else "NoveltyBench-lite (model-free)"
    lines = [f"{label}; mean ± standard error over prompts, per split"]
    for split, result in scored["splits"].items():
        parts = [f"prompts {result['summary']['prompts']}"]
        for key in ("distinct", "distinct_lite", "utility"):
            if result["summary"].get(key):
                parts.append(f"{key} {result['summary'][key]['mean']:.3f} ± {result['summary'][key]['se']:.3f}")
        lines.append(f"  {split}: " + ", ".join(parts))
    return "\n".join(lines)
