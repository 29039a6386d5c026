"""The leaderboard's numbers, read from run records: the calibration score and its parts (pure).

The **calibration score** (0-100, higher is better) ranks systems on the numeric sampling
tasks. It is ``calbench.metrics.calibration`` applied to the valid answers the record stores
for each of the 42 selected prompts (24 unseen-parameter families, 6 held-out): per prompt,
the valid share times the mean quality of disjoint chunks of 50 valid answers, each chunk's
PIT distance to uniform placed between exact sampling's 95th percentile (full credit) and a
collapse onto the median (none); averaged over each family's prompts, then over the 30
families. It does not depend on the samples per prompt, so rows run at 200 and at 1000
samples compare. A row needs at least ``M_REF`` (50) samples per prompt (below, no prompt can
fill a chunk: "too few samples"); a prompt with fewer than 50 *valid* answers is scored on
them against exact sampling at their number, which is not sample-size-free, so each row
shows the share of such prompts (their part of the score is at most their valid share).

Also from the stored samples: the valid rate, ``pit_w1`` (mean over families of the
per-prompt PIT W1) and KS@100 (the share of prompts whose first 100 valid answers pass the
KS test at p > 1e-4; "too few samples" below 100 samples per prompt).

The former score, **CS@n** (secondary: it depends on the samples per prompt), is per family
f::

    s_f = valid_rate_f * min(1, (floor_f + 1.96 se(w1_f)) / w1_f)   (0 without a valid sample)
    CS@n = 100 * mean_f s_f

where ``floor_f`` is what exact draws score at the same sample size (``w1 - excess_w1``)
and ``se(w1_f)`` the standard error of the family's W1: "is this family indistinguishable
from exact sampling at this n?", which more samples make harder to pass. Its standard error
propagates the families' standard errors of ``valid_rate`` and ``w1`` (delta method,
families independent: ``stats.quadrature_mean``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from calbench.families import ALL_FAMILIES, FAMILIES
from calbench.leaderboard.records.record_types import Pair, RunRecord
from calbench.metrics import calibration, pit
from calbench.metrics.calibration import Prompt
from calbench.metrics.prompt_scores import (
    family_mean_pit_w1,
    ks_pass_share,
    pooled_valid_rate,
    prompt_rows,
    share_below_reference,
)
from calbench.metrics.tails import location_following
from calbench.stats import UNDEFINED, Z95, Estimate, quadrature_mean
from calbench.task_names import DIAGNOSTIC_TASKS, NAME_HALVES, NUMERIC_SPLITS, SAMPLING_TASKS, SPLIT_TASKS

TIERS = {1: "I", 2: "II", 3: "III"}


def estimate(pair: Pair | None) -> Estimate:
    """A record's stored ``[value, se]`` pair (``None`` for undefined) as an ``Estimate``."""
    if not pair:
        return UNDEFINED
    value, se = pair
    return Estimate(math.nan if value is None else value, math.nan if se is None else se)


def family_metric(record: RunRecord, family: str, metric: str) -> Estimate:
    """A sampling metric of one family, from whichever numeric split asks about it."""
    task = record["tasks"].get(SAMPLING_TASKS[FAMILIES[family].eval_split])
    if task is None:
        return UNDEFINED
    return estimate(task["families"].get(family, {}).get(metric))


def family_score(valid: Estimate, w1: Estimate, excess: Estimate) -> Estimate:
    """s_f and its standard error (module docstring)."""
    v = valid.value if math.isfinite(valid.value) else 0.0
    vse = valid.se if math.isfinite(valid.se) else 0.0
    if not (math.isfinite(w1.value) and math.isfinite(excess.value)) or v == 0:
        return Estimate(0.0, 0.0)
    wse = w1.se if math.isfinite(w1.se) else 0.0
    attainable = max(w1.value - excess.value, 0.0) + Z95 * wse
    if w1.value <= attainable:
        return Estimate(v, vse)  # indistinguishable from exact draws: the ratio is capped at 1
    ratio = attainable / w1.value
    se = math.hypot(ratio * vse, v * attainable / w1.value**2 * wse)
    return Estimate(v * ratio, se)


def threshold_score(record: RunRecord) -> Estimate:
    """CS@n = 100 x mean over the 30 families of s_f; undefined without both numeric sampling tasks."""
    if not all(SAMPLING_TASKS[s] in record["tasks"] for s in NUMERIC_SPLITS):
        return UNDEFINED
    parts = [family_score(*(family_metric(record, f, m) for m in ("valid_rate", "w1", "excess_w1"))) for f in FAMILIES]
    mean = quadrature_mean(parts, nan="propagate")
    return Estimate(100 * mean.value, 100 * mean.se)


def samples_per_prompt(record: RunRecord) -> int | None:
    """The fewest samples per prompt of the record's numeric sampling tasks (None if not run)."""
    counts = [
        record["tasks"][t].get("samples_per_prompt") if t in record["tasks"] else None for t in SAMPLING_TASKS.values()
    ]
    return min(c for c in counts if c) if all(counts) else None


def _too_few(record: RunRecord, needed: int) -> str | None:
    n = samples_per_prompt(record)
    return f"too few samples ({n} < {needed})" if n is not None and n < needed else None


def _split_prompts(record: RunRecord, split: str) -> dict[str, list[Prompt]] | str | None:
    task = record["tasks"].get({**SPLIT_TASKS, **DIAGNOSTIC_TASKS}[split])
    if task is None or "samples" not in task:
        return None
    n = task.get("samples_per_prompt")
    if n is not None and n < calibration.M_REF:
        return f"too few samples ({n} < {calibration.M_REF})"
    rows = prompt_rows(task["samples"])
    if split in NAME_HALVES:
        rows = {f: p for f, p in rows.items() if ALL_FAMILIES[f].heldout == NAME_HALVES[split]}
    return rows


@dataclass(frozen=True, eq=False)  # eq by identity: a record is a dict
class Scored:
    """A run record and the numbers re-scored from its stored samples, each computed once, when
    first asked for: a page scores every record once and hands it on scored (a table, the ranking
    and the plots ask for the same score; the calibration score of a record takes seconds)."""

    record: RunRecord
    _per_split: dict[tuple[str, str], Estimate | str] = field(default_factory=dict, compare=False, repr=False)
    _rows: dict[str, dict[str, list[Prompt]] | str | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.record["name"]

    @cached_property
    def prompts(self) -> dict[str, list[Prompt]] | None:
        """family -> its prompts' stored samples, over both numeric splits; None unless both
        sampling tasks were run with their samples stored."""
        stored = []
        for split in NUMERIC_SPLITS:
            task = self.record["tasks"].get(SAMPLING_TASKS[split])
            if task is None or "samples" not in task:
                return None
            stored += task["samples"]
        return prompt_rows(stored)

    @cached_property
    def calibration_score(self) -> Estimate | str:
        """The sample-size-free calibration score (module docstring); "too few samples" below
        ``M_REF`` samples per prompt; undefined without stored samples of both numeric splits."""
        if (why := _too_few(self.record, calibration.M_REF)) is not None:
            return why
        return UNDEFINED if self.prompts is None else calibration.calibration_score(self.prompts)

    @cached_property
    def below_reference(self) -> Estimate:
        """The share of prompts with fewer than ``M_REF`` valid answers (scored, but not n-free)."""
        return UNDEFINED if self.prompts is None else share_below_reference(self.prompts)

    @cached_property
    def valid_rate(self) -> Estimate:
        """Mean over the 30 families of each family's share of valid answers (stored samples)."""
        return UNDEFINED if self.prompts is None else pooled_valid_rate(self.prompts)

    @cached_property
    def mean_pit_w1(self) -> Estimate:
        """Mean over families of the mean per-prompt ``pit_w1`` (stored samples)."""
        return UNDEFINED if self.prompts is None else family_mean_pit_w1(self.prompts)

    @cached_property
    def ks_at_n(self) -> Estimate | str:
        """KS@N (N = ``pit.KS_N``) over the 42 prompts: the share whose first N valid answers pass the KS test."""
        return self.ks_at(pit.KS_N)

    def ks_at(self, n: int) -> Estimate | str:
        if (why := _too_few(self.record, n)) is not None:
            return why
        return UNDEFINED if self.prompts is None else ks_pass_share(self.prompts, n)

    def split_rows(self, split: str) -> dict[str, list[Prompt]] | str | None:
        """family -> one split's stored prompts (``_split_prompts``), parsed once: the reason where
        too few samples were, None where the split was not run with its samples stored."""
        if split not in self._rows:
            self._rows[split] = _split_prompts(self.record, split)
        return self._rows[split]

    def split_score(self, split: str) -> Estimate | str:
        """The calibration score on one split's prompts alone (``SPLIT_TASKS``, ``DIAGNOSTIC_TASKS``):
        its families' mean."""
        if ("score", split) not in self._per_split:
            rows = self.split_rows(split)
            value = (
                rows if isinstance(rows, str) else UNDEFINED if rows is None else calibration.calibration_score(rows)
            )
            self._per_split[("score", split)] = value
        return self._per_split[("score", split)]

    def split_families(self, split: str) -> dict[str, tuple[Estimate, Estimate]] | str:
        """Each family of one split's prompts: its calibration score (the split score of that family
        alone) and its share of valid answers (``pooled_valid_rate``); {} where the split was not
        run with its samples stored, the reason where too few samples were."""
        rows = self.split_rows(split)
        if isinstance(rows, str):
            return rows
        return {
            family: (calibration.calibration_score({family: prompts}), pooled_valid_rate({family: prompts}))
            for family, prompts in sorted((rows or {}).items())
        }

    def split_following(self, split: str) -> Estimate | str:
        """Spearman's rho of the laws' and the answers' medians over one split's prompts."""
        if ("following", split) not in self._per_split:
            rows = self.split_rows(split)
            if rows is None or isinstance(rows, str):
                value: Estimate | str = UNDEFINED if rows is None else rows
            else:
                value = location_following([p for prompts in rows.values() for p in prompts])
            self._per_split[("following", split)] = value
        return self._per_split[("following", split)]


def scored(records: Sequence[RunRecord | Scored]) -> list[Scored]:
    """Each record scored: a ``Scored`` as it is (its numbers are computed once, wherever asked
    for), a run record wrapped."""
    return [r if isinstance(r, Scored) else Scored(r) for r in records]


def tier_metric(record: RunRecord, tier: int, metric: str) -> Estimate:
    """Equal-weight mean of a sampling metric over one complexity tier's families."""
    values = [family_metric(record, f, metric) for f, fam in FAMILIES.items() if fam.tier == tier]
    return quadrature_mean(values, nan="propagate")


def task_metric(record: RunRecord, task: str, metric: str) -> Estimate:
    entry = record["tasks"].get(task)
    return estimate(entry["overall"].get(metric)) if entry else UNDEFINED


def untrained(record: RunRecord) -> bool:
    """A base or instruct model's record (no adapter, no fine-tune)."""
    return record["type"] in ("base", "instruct")


def drift_metric(record: RunRecord) -> Estimate:
    """The adapter's drift; 0 for a base or instruct model (no adapter), undefined otherwise."""
    d = record.get("drift")
    if not d:
        return Estimate(0.0, 0.0) if untrained(record) else UNDEFINED
    se = d.get("drift_kl_se")
    return Estimate(d["drift_kl"], math.nan if se is None else se)


R = TypeVar("R", RunRecord, Scored)


def ranked(records: Sequence[R]) -> list[R]:
    """Highest calibration score first; systems without one last, by name (scored records, or
    records scored here)."""

    def key(r: R) -> tuple[bool, float, str]:
        scored = r if isinstance(r, Scored) else Scored(r)
        score = scored.calibration_score
        cs = score.value if isinstance(score, Estimate) else math.nan
        return (not math.isfinite(cs), -cs if math.isfinite(cs) else 0.0, scored.name)

    return sorted(records, key=key)
