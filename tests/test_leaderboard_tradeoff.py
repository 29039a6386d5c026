"""The trade-off table and plot (calibration gained against retention lost), on the committed
SmolLM2 records and the per-item retention scores they store."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from calbench import cli, task_names
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages import numbers, tradeoff
from calbench.leaderboard.records import store

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "leaderboards" / "results"
BASE, SOFT = "smollm2-135m-instruct-base", "smollm2-135m-instruct-soft"


@pytest.fixture(scope="module")
def stored():
    return {r["name"]: r for r in store.load_records(STORE)}


def _mean_difference(base: dict, tuned: dict, task: str, metric: str) -> float:
    """tuned - base over the items both records store, straight from the stored items."""
    key = lambda item: (item["doc_id"], item["doc_hash"], item["filter"])  # noqa: E731
    b = {key(i): i["scores"][metric] for i in base["tasks"][task]["items"]}
    t = {key(i): i["scores"][metric] for i in tuned["tasks"][task]["items"]}
    assert set(b) == set(t) and len(b) > 50
    return float(np.mean([t[k] - b[k] for k in b]))


def test_point_is_the_score_difference_and_the_mean_paired_loss(stored):
    p = tradeoff.point(stored[BASE], stored[SOFT])
    b, s = numbers.Scored(stored[BASE]).calibration_score, numbers.Scored(stored[SOFT]).calibration_score
    assert p.calibration_gained.value == pytest.approx(s.value - b.value)
    assert p.calibration_gained.se == pytest.approx(np.hypot(s.se, b.se))
    lost = {key: -_mean_difference(stored[BASE], stored[SOFT], *key) for key in tradeoff.RETENTION}
    for key, value in lost.items():  # base - adapter: positive when the adapter lost
        assert p.lost[key].delta.value == pytest.approx(value)
        assert p.lost[key].low <= value <= p.lost[key].high
    assert p.retention_lost.value == pytest.approx(np.mean(list(lost.values())))
    ses = [d.delta.se for d in p.lost.values()]
    assert p.retention_lost.se == pytest.approx(np.sqrt(np.sum(np.square(ses))) / 3)
    # The soft adapter lost arithmetic: 0.15 -> 0.03 exact_flexible on the same 200 items.
    assert p.lost[("calbench_arithmetic", "exact_flexible")].delta.value == pytest.approx(0.12)


def test_cli_writes_table_and_plot(stored, tmp_path, capsys):
    rc = cli.main(["leaderboard", "tradeoff", BASE, SOFT, "--output", str(tmp_path), "--results-dir", str(STORE)])
    assert rc == 0
    text = (tmp_path / tradeoff.TABLE).read_text()
    assert f"`calbench leaderboard tradeoff {BASE} {SOFT} --output {tmp_path}`" in text
    rows = [line for line in text.splitlines() if line.startswith(f"| {SOFT} ") or line.startswith(f"| {BASE} ")]
    assert len(rows) == 2
    assert f"### {SOFT} against {BASE}" in text and "| calbench_noveltybench_curated  | distinct_lite" in text
    png = (tmp_path / tradeoff.PLOT).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_refusals_name_the_problem(stored, tmp_path, capsys):
    argv = ["leaderboard", "tradeoff", "nobody", SOFT, "--output", str(tmp_path), "--results-dir", str(STORE)]
    assert cli.main(argv) != 0
    assert "no run record named nobody in" in capsys.readouterr().err
    no_score = copy.deepcopy(stored[SOFT])
    for split in task_names.SAMPLING_TASKS.values():
        no_score["tasks"].pop(split, None)
    with pytest.raises(RefusedRunError, match="no calibration score"):
        tradeoff.point(stored[BASE], no_score)
    no_items = copy.deepcopy(stored[SOFT])  # a record without the retention suite's items
    for entry in no_items["tasks"].values():
        entry.pop("items", None)
    with pytest.raises(RefusedRunError, match="share no task"):
        tradeoff.point(stored[BASE], no_items)
