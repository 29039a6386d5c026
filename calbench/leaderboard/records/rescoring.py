"""Stored numbers against the code that reads them: every numeric sampling task's aggregates
scored again from the record's own stored answers, compared, and (after a metric's definition
changed) written back.

A record keeps each prompt's valid answers (``samples``: 6 significant digits, in order) and
the number of responses, so every sampling metric can be scored again from them
(``prompt_scores.score_values`` per prompt, ``prompt_scores.summarize`` per task) but the
``support_violation_rate`` (the answers that parsed but fell outside the support are not kept)
and a protocol's own diagnostics (``calbench.harness.numeric.protocol_metrics``). A stored
aggregate (value or standard error, overall or per family) *agrees* with its re-scoring when
they differ by less than ``RTOL`` of the larger plus ``ATOL``: the answers' rounding moves a
metric by about 1e-6 of itself; a changed definition (the symmetric Anderson-Darling: 785.43
stored, 958.35 today) by far more. ``calbench leaderboard rescore`` lists the disagreements
(``--check``) or rewrites the named metrics from the answers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calbench.families import target_from_key
from calbench.leaderboard.records import store
from calbench.leaderboard.records.record_types import Pair, RunRecord, TaskEntry
from calbench.metrics import prompt_scores
from calbench.provenance import calbench_commit
from calbench.stats import Estimate, Summary

NOT_RESCORABLE = ("support_violation_rate",)  # needs the answers that parsed but were invalid: not stored
RTOL = 1e-3  # of the larger of the stored and the re-scored number
ATOL = 1e-6  # for numbers near 0 (an exact sampler's excess W1)


@dataclass(frozen=True)
class Mismatch:
    """A stored aggregate its re-scoring does not agree with."""

    task: str
    family: str | None  # None: the task's overall number
    metric: str
    part: str  # "value" or "standard error"
    stored: float | None
    rescored: float | None

    def __str__(self) -> str:
        where = f"{self.task}.{'overall' if self.family is None else 'families.' + self.family}.{self.metric}"
        return f"{where} ({self.part}): stored {self.stored}, re-scored {self.rescored}"


def agree(stored: float | None, rescored: float) -> bool:
    """Whether a stored number (None: undefined) and its re-scoring agree beyond rounding."""
    if stored is None or not math.isfinite(rescored):
        return stored is None and not math.isfinite(rescored)
    return abs(stored - rescored) <= RTOL * max(abs(stored), abs(rescored)) + ATOL


def rescored(entry: TaskEntry) -> Summary:
    """A numeric sampling task's summary, scored again from its stored answers."""
    scores = [
        prompt_scores.score_values(target_from_key(p["target"]), np.asarray(p["values"], dtype=float), int(p["n"]))
        for p in entry["samples"]
    ]
    return prompt_scores.summarize(scores)


def _pairs(entry: TaskEntry) -> Iterable[tuple[str | None, str, Pair]]:
    """(family or None, metric, stored [value, se]) of a task's aggregates."""
    yield from ((None, metric, pair) for metric, pair in entry["overall"].items())
    for family, metrics in (entry.get("families") or {}).items():
        yield from ((family, metric, pair) for metric, pair in metrics.items())


def _estimate(summary: Summary, family: str | None, metric: str) -> Estimate | None:
    found = summary.overall if family is None else summary.families.get(family, {})
    return found.get(metric) if metric not in NOT_RESCORABLE else None


def mismatches(record: RunRecord, summaries: Mapping[str, Summary] | None = None) -> list[Mismatch]:
    """Every stored aggregate of a record's numeric sampling tasks that its re-scoring does not
    agree with (``summaries``: the tasks' re-scorings, if already made)."""
    out = []
    for task, entry in record["tasks"].items():
        if "samples" not in entry:
            continue
        summary = summaries[task] if summaries is not None else rescored(entry)
        for family, metric, (value, se) in _pairs(entry):
            estimate = _estimate(summary, family, metric)
            if estimate is None:
                continue
            for part, stored, new in (("value", value, estimate.value), ("standard error", se, estimate.se)):
                if not agree(stored, new):
                    out.append(Mismatch(task, family, metric, part, stored, new if math.isfinite(new) else None))
    return out


def rewrite(record: RunRecord, metrics: Sequence[str], summaries: Mapping[str, Summary] | None = None) -> RunRecord:
    """The record with each stored aggregate of ``metrics`` (a [value, se] pair, overall or per
    family, of a numeric sampling task) that disagrees with its re-scoring replaced by it; the
    record names the metrics rewritten, and the commit that did, under ``rescored`` (the others
    were made at its ``calbench_commit``)."""
    done = set()
    for task, entry in record["tasks"].items():
        if "samples" not in entry:
            continue
        summary = summaries[task] if summaries is not None else rescored(entry)
        for family, metric, pair in list(_pairs(entry)):
            estimate = _estimate(summary, family, metric)
            if metric not in metrics or estimate is None:
                continue
            if not (agree(pair[0], estimate.value) and agree(pair[1], estimate.se)):
                pair[:] = [x if math.isfinite(x) else None for x in (estimate.value, estimate.se)]
                done.add(metric)
    if done:
        record["rescored"] = {**record.get("rescored", {}), **dict.fromkeys(sorted(done), calbench_commit())}
    return record


def record_files(paths: Sequence[Path]) -> list[Path]:
    """Run record files: each file given, and every record file under each folder given (its
    ``samples/`` left out)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += [p for p in sorted(path.rglob("*.json")) if "samples" not in p.relative_to(path).parts[:-1]]
        else:
            out.append(path)
    return [p for p in out if store.is_record_file(p)]


def rescore_files(paths: Sequence[Path], metrics: Sequence[str]) -> list[tuple[Path, list[Mismatch]]]:
    """Each record's disagreements; with ``metrics``, those metrics rewritten from the stored
    answers first (a record is saved again only if one of them changed)."""
    out = []
    for path in record_files(paths):
        record = store.load_record(path)
        summaries = {t: rescored(e) for t, e in record["tasks"].items() if "samples" in e}
        found = mismatches(record, summaries)
        if metrics and any(m.metric in metrics for m in found):
            store.save_record(rewrite(record, metrics, summaries), path.parent)
            found = [m for m in found if m.metric not in metrics]
        out.append((path, found))
    return out


def describe(results: Sequence[tuple[Path, Sequence[Mismatch]]]) -> list[str]:
    """One line per disagreement, naming its record."""
    return [f"{path}: {m}" for path, found in results for m in found]
