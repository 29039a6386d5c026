"""Stored numbers against the code that reads them (issue 49, case 12): every numeric sampling
task's aggregates scored again from the record's stored answers (calbench.leaderboard.records.rescoring)."""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from calbench import cli
from calbench.families import make_target
from calbench.leaderboard.records import rescoring, store
from calbench.metrics import prompt_scores
from calbench.stats import seed_for

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "leaderboards" / "results"


def _entry():
    """A sampling task's entry as a run stores it: aggregates scored on the parsed answers, the
    answers kept to 6 significant digits (``prompt_scores.stored_answers``)."""
    rng = np.random.default_rng(seed_for("rescoring test"))
    targets = [make_target("gaussian", {"mu": 1.0, "sigma": 2.0}), make_target("poisson", {"lambda": 4.0})]
    targets.append(make_target("exponential", {"lambda": 7.0}))
    scores, samples = [], []
    for target in targets:
        values = target.law.rvs(size=60, random_state=rng)
        values = np.rint(values) if target.integer else values
        responses = [repr(float(v)) for v in values] + ["no"] * 4  # 4 responses that do not parse
        scores.append(prompt_scores.score_prompt(target, responses))
        kept = [float(f"{v:.6g}") for v in values]
        samples.append({"family": target.family.name, "target": target.key, "n": len(responses), "values": kept})
    summary = prompt_scores.summarize(scores)

    def pairs(estimates):
        return {
            m: [None if not math.isfinite(e.value) else e.value, None if not math.isfinite(e.se) else e.se]
            for m, e in estimates.items()
        }

    families = {f: pairs(m) for f, m in summary.families.items()}
    return {"overall": pairs(summary.overall), "families": families, "samples": samples}


def test_an_entry_agrees_with_its_rescoring_up_to_the_answers_rounding():
    entry = _entry()
    assert rescoring.mismatches({"tasks": {"t": entry}}) == []
    exact_answers = rescoring.rescored(entry)
    # what agreement allows: the answers' rounding to 6 digits, not a changed number
    assert rescoring.agree(entry["overall"]["w1"][0], exact_answers.overall["w1"].value)
    assert not rescoring.agree(785.43, 958.35) and not rescoring.agree(1.0, 1.01) and rescoring.agree(None, math.nan)
    assert not rescoring.agree(None, 0.5) and not rescoring.agree(0.5, math.nan)


def test_a_stale_metric_is_found_and_rewritten_from_the_stored_answers():
    """Case 12: 48 stored ad_stat aggregates predated the symmetric Anderson-Darling, and nothing noticed."""
    entry = _entry()
    stale = copy.deepcopy(entry)
    stale["overall"]["ad_stat"][0] *= 0.82
    stale["families"]["gaussian"]["ad_stat"][1] *= 2
    record = {"tasks": {"calbench_numeric_quick": stale}}
    found = [str(m) for m in rescoring.mismatches(record)]
    assert found == [
        f"calbench_numeric_quick.overall.ad_stat (value): stored {stale['overall']['ad_stat'][0]}, "
        f"re-scored {rescoring.rescored(entry).overall['ad_stat'].value}",
        f"calbench_numeric_quick.families.gaussian.ad_stat (standard error): stored "
        f"{stale['families']['gaussian']['ad_stat'][1]}, re-scored {rescoring.rescored(entry).families['gaussian']['ad_stat'].se}",
    ]
    rewritten = rescoring.rewrite(record, ["ad_stat"])
    assert rescoring.mismatches(rewritten) == [] and set(rewritten["rescored"]) == {"ad_stat"}
    # only the metric named is rewritten
    w1 = copy.deepcopy(entry)
    w1["overall"]["w1"][0] += 1
    assert [m.metric for m in rescoring.mismatches(rescoring.rewrite({"tasks": {"t": w1}}, ["ad_stat"]))] == ["w1"]


def test_support_violations_and_protocol_diagnostics_are_not_rescored():
    entry = _entry()
    entry["overall"]["support_violation_rate"] = [0.25, 0.01]  # the invalid answers are not stored
    entry["overall"]["tokens_per_valid"] = [3.0, 0.1]  # a protocol's own diagnostic
    assert rescoring.mismatches({"tasks": {"t": entry}}) == []


def test_rescore_lists_disagreements_then_rewrites_the_metric(tmp_path, capsys):
    """`calbench leaderboard rescore` on a store: exit 1 naming each disagreement; with --metric the
    record is rewritten (its samples untouched) and the next check passes."""
    task = "calbench_numeric_quick"
    entry = {**_entry(), "evaluation": "quick", "prompts": 3, "samples_per_prompt": 64, "version": 1}
    entry["overall"]["ad_stat"][0] *= 0.5
    record = {
        "schema": 2,
        "name": "r",
        "type": "reference",
        "command": "calbench eval",
        "model": {"backend": "calbench-oracle"},
        "evaluations": {"quick": {"tasks": [task]}},
        "tasks": {task: entry},
    }
    store.save_record(record, tmp_path)
    samples = (tmp_path / "samples" / "r.json").read_bytes()
    assert cli.main(["leaderboard", "rescore", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"differs: {tmp_path / 'r.json'}: {task}.overall.ad_stat (value)" in out
    assert "1 records re-scored from their stored answers: 1 stored aggregates disagree beyond rounding" in out
    assert cli.main(["leaderboard", "rescore", str(tmp_path), "--metric", "ad_stat"]) == 0
    assert cli.main(["leaderboard", "rescore", str(tmp_path / "r.json")]) == 0
    assert "every one agrees" in capsys.readouterr().out
    assert (tmp_path / "samples" / "r.json").read_bytes() == samples
    assert json.loads((tmp_path / "r.json").read_text())["rescored"].keys() == {"ad_stat"}
    assert cli.main(["leaderboard", "rescore", str(tmp_path / "nothing")]) == 2


def _one_of_each() -> list[Path]:
    """Each top-level record (the rows) and, of every curve store (curves, protocols,
    generalization, transfer), the last point of its first run: every task and protocol the store
    holds, in a few minutes with a cold cache."""
    rows: list[Path] = []
    runs: dict[Path, dict[Path, list[Path]]] = {}
    for f in rescoring.record_files([RESULTS]):
        if f.name.startswith("step-"):  # a curve point: its run is its folder, its store the one above
            runs.setdefault(f.parent.parent, {}).setdefault(f.parent, []).append(f)
        else:
            rows.append(f)
    last = [max(points[min(points)]) for points in runs.values()]
    return sorted(rows + last)


@pytest.mark.slow
def test_every_row_s_stored_aggregates_are_what_its_stored_answers_give_today():
    """Case 12, CI's share of the sweep below: every row's record and one point of every curve
    store, scored again from its stored answers, agree beyond rounding with every stored overall
    and per-family value and standard error."""
    records = _one_of_each()
    assert len(records) >= 18 and set(rescoring.record_files([RESULTS])) >= set(records)
    results = rescoring.rescore_files(records, [])
    assert rescoring.describe(results) == []


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("CALBENCH_EXHAUSTIVE"), reason="about 2 min warm, an hour cold: CALBENCH_EXHAUSTIVE=1"
)
def test_every_stored_aggregate_is_what_the_stored_answers_give_today():
    """Case 12: no stored metric the current code would not compute. Every numeric sampling task of
    every committed record (rows, curve points, protocols, generalization, transfer) scored again
    from its stored answers: every overall and per-family value and standard error agrees beyond
    rounding. The same as calbench leaderboard rescore leaderboards/results (exit 0)."""
    results = rescoring.rescore_files([RESULTS], [])
    assert len(results) >= 148  # the records committed when it was written
    assert rescoring.describe(results) == []
