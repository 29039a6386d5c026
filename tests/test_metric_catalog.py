"""One metric table: every metric a task reports is in it, and lm-eval, the tables, the store
and the docs all read it."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.records import checks, store
from calbench.metrics import catalog
from calbench.metrics.catalog import METRICS

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "leaderboards" / "results"


def test_every_reported_metric_is_in_the_table_with_lm_evals_direction(calbench_tasks):
    seen = set()
    for task in calbench_tasks.values():  # calbench's task classes and plain lm-eval ones (mmlu_mini)
        for key, higher in task.higher_is_better().items():
            metric = catalog.find(key)
            assert metric is not None, f"{task.config.task}: {key} is not in calbench.metrics.catalog"
            assert higher == (metric.better == "higher"), key
            seen.add(metric.name)
    assert {"valid_rate", "w1_iqr", "canonical_mass", "support_90", "parse_rate", "distinct_lite"} <= seen
    assert set(METRICS) - seen <= {
        "calibration_score",
        "medians_rho",
        "drift_kl",
        "distinct",
        "utility",
    }  # not task metrics


def test_keys_resolve_to_their_metric():
    assert catalog.base_name("valid_rate/gaussian_stderr") == "valid_rate"
    assert catalog.base_name("w1_iqr_median") == "w1_iqr" and catalog.base_name("support_90_median") == "support_90"
    assert catalog.higher_is_better("valid_rate/gaussian_stderr") and not catalog.higher_is_better("w1_iqr_median")
    assert catalog.arrow("canonical_mass") == "↑" and catalog.arrow("seq_kl") == "↓" and catalog.arrow("freq_A") == ""
    assert catalog.find("acc_norm") is None and not catalog.higher_is_better("acc_norm")  # an lm-eval task's own


def test_every_metric_has_a_meaning_and_a_range():
    for m in METRICS.values():
        assert m.better in ("higher", "lower", "none") and m.meaning and m.low < m.high, m
    assert METRICS["pit_w1"].range == "[0, 0.5]" and METRICS["excess_w1"].range == "[-∞, ∞]"


@pytest.fixture(scope="module")
def stored():
    return store.load_records(STORE)


def test_every_committed_value_lies_in_its_range(stored):
    checked = 0
    for record in stored:
        for entry in record["tasks"].values():
            pairs = [*entry["overall"].items(), *(p for f in entry.get("families", {}).values() for p in f.items())]
            for key, (value, _) in pairs:
                if value is not None:
                    assert METRICS[catalog.base_name(key)].allows(value), (record["name"], key, value)
                    checked += 1
    assert checked > 3000


@pytest.mark.parametrize(
    ("metric", "value", "message"),
    [
        ("well_formed_rate", 7.0, r"well_formed_rate lies in \[0, 1\], got 7"),  # missing from the old hand list
        ("pit_w1", 0.7, r"pit_w1 lies in \[0, 0.5\], got 0.7"),
        ("lag1_autocorr", -1.5, r"lag1_autocorr lies in \[-1, 1\]"),
        ("made_up", 0.5, "not a metric calbench reports"),
    ],
)
def test_the_store_refuses_a_value_outside_its_range(stored, metric, value, message):
    record = copy.deepcopy(next(r for r in stored if r["name"] == "oracle"))
    record["tasks"]["calbench_numeric_unseen"]["overall"][metric] = [value, 0.01]
    with pytest.raises(RefusedRunError, match=message):
        checks.validate_record(record)


def test_an_lm_eval_tasks_own_metric_has_no_range_but_must_be_finite(stored):
    record = copy.deepcopy(next(r for r in stored if r["name"] == "oracle"))
    record["tasks"]["tinyArc"] = {
        **record["tasks"]["calbench_numeric_unseen_exact"],
        "overall": {"acc_norm": [3.5, 0.1]},
    }
    record["tasks"]["tinyArc"].pop("families")
    record["evaluations"]["sample-free"]["tasks"].append("tinyArc")
    checks.validate_record(record)
    record["tasks"]["tinyArc"]["overall"]["acc_norm"] = [math.inf, 0.1]
    with pytest.raises(RefusedRunError, match="finite number"):
        checks.validate_record(record)


def test_the_docs_show_the_table():
    text = (ROOT / "tasks" / "README.md").read_text()
    start, end = "<!-- metrics:start -->", "<!-- metrics:end -->"
    assert text.split(start, 1)[1].split(end, 1)[0].strip() == catalog.markdown(), (
        "tasks/README.md's metric table is stale: calbench leaderboard render"
    )
