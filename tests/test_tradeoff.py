"""The trade-off table and plot (calibration gained against retention lost), on the committed
SmolLM2 records and offline retention runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calbench import cli
from calbench.leaderboard import numbers, tradeoff
from calbench.leaderboard import records as run_records
from calbench.leaderboard.records import RefusedRunError
from calbench.retention_delta import _item_value, item_scores

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = ROOT / "leaderboards" / "smollm2-cpu" / "results_offline"
BASE, SOFT = "smollm2-135m-instruct-base", "smollm2-135m-instruct-soft"


def _retention_run(system: str) -> Path:
    found = [p for p in sorted((OFFLINE / system).rglob("results_*.json")) if '"calbench_arithmetic":' in p.read_text()]
    assert found, f"no committed offline retention run of {system}"
    return found[-1]


@pytest.fixture(scope="module")
def stored():
    return {r["name"]: r for r in run_records.load_records(ROOT / "leaderboards" / "results")}


def _mean_difference(base_file: Path, tuned_file: Path, task: str, metric: str) -> float:
    """tuned - base over the items of both samples logs, straight from the logs."""
    b, t = item_scores(base_file, task), item_scores(tuned_file, task)
    assert set(b) == set(t)
    values = [(_item_value(t[k], metric), _item_value(b[k], metric)) for k in b]
    return float(np.mean([tv - bv for tv, bv in values if tv is not None and bv is not None]))


def test_point_is_the_score_difference_and_the_mean_paired_loss(stored):
    base, soft = _retention_run("base"), _retention_run("soft")
    p = tradeoff.point(stored[BASE], base, stored[SOFT], soft)
    b, s = numbers.calibration_score(stored[BASE]), numbers.calibration_score(stored[SOFT])
    assert p.calibration_gained.value == pytest.approx(s.value - b.value)
    assert p.calibration_gained.se == pytest.approx(np.hypot(s.se, b.se))
    lost = {key: -_mean_difference(base, soft, *key) for key in tradeoff.RETENTION}
    for key, value in lost.items():  # base - adapter: positive when the adapter lost
        assert p.lost[key].delta.value == pytest.approx(value)
        assert p.lost[key].low <= value <= p.lost[key].high
    assert p.retention_lost.value == pytest.approx(np.mean(list(lost.values())))
    ses = [d.delta.se for d in p.lost.values()]
    assert p.retention_lost.se == pytest.approx(np.sqrt(np.sum(np.square(ses))) / 3)
    # The soft adapter lost arithmetic: 0.15 -> 0.03 exact_flexible on the same 200 items.
    assert p.lost[("calbench_arithmetic", "exact_flexible")].delta.value == pytest.approx(0.12)


def test_cli_writes_table_and_plot(stored, tmp_path, capsys):
    base, soft = _retention_run("base"), _retention_run("soft")
    rc = cli.main(["leaderboard", "tradeoff", BASE, str(base), "--adapter", SOFT, str(soft), "--output", str(tmp_path)])
    assert rc == 0
    text = (tmp_path / tradeoff.TABLE).read_text()
    assert f"`calbench leaderboard tradeoff {BASE} {base} --adapter {SOFT} {soft} --output {tmp_path}`" in text
    rows = [line for line in text.splitlines() if line.startswith(f"| {SOFT} ") or line.startswith(f"| {BASE} ")]
    assert len(rows) == 2
    png = (tmp_path / tradeoff.PLOT).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_refusals_name_the_problem(stored, tmp_path, capsys):
    base, soft = _retention_run("base"), _retention_run("soft")
    assert (
        cli.main(
            ["leaderboard", "tradeoff", "nobody", str(base), "--adapter", SOFT, str(soft), "--output", str(tmp_path)]
        )
        != 0
    )
    assert "no run record named nobody in" in capsys.readouterr().err
    no_score = json.loads(json.dumps(stored[SOFT]))
    for split in numbers.SAMPLING_TASKS.values():
        no_score["tasks"].pop(split, None)
    with pytest.raises(RefusedRunError, match="no calibration score"):
        tradeoff.point(stored[BASE], base, no_score, soft)
    with pytest.raises(RefusedRunError, match="share no task"):  # a run without the retention suite
        sampling = next(
            p for p in sorted((ROOT / "leaderboards/smollm2-cpu/results_1000/soft").rglob("results_*.json"))
        )
        tradeoff.point(stored[BASE], base, stored[SOFT], sampling)
