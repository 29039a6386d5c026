"""Results where people look for them: a run record as an Every Eval Ever 0.3.0 file, validated
against the schema the ``every-eval-ever`` package on PyPI publishes (its wheel, fetched once by
pip into calbench's cache and checked by its SHA-256; the package itself needs Python 3.12, so it
is read, not installed), and the ``model-index`` block of an adapter's card.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from calbench.cache import cache_dir
from calbench.leaderboard.pages import card, export
from calbench.leaderboard.records import store

ROOT = Path(__file__).resolve().parent.parent
BOARD = ROOT / "leaderboards"
WHEEL = "every_eval_ever-0.3.0-py3-none-any.whl"
WHEEL_SHA256 = "564b8bc624c1f822f749a769dc69dc058a736e83d920cbeb147c3a30d3152317"  # PyPI's every-eval-ever 0.3.0


@pytest.fixture(scope="module")
def schema():
    """``every_eval_ever/schemas/eval.schema.json`` from the published 0.3.0 wheel."""
    folder = cache_dir() / "every-eval-ever"
    wheel = folder / WHEEL
    if not wheel.is_file():
        cmd = [sys.executable, "-m", "pip", "download", "every-eval-ever==0.3.0", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "-d", str(folder), "-q"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == WHEEL_SHA256
    with zipfile.ZipFile(wheel) as z:
        found = json.loads(z.read("every_eval_ever/schemas/eval.schema.json"))
    assert found["version"] == "0.3.0"
    return found


def _errors(schema, document):
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def _published():
    return sorted(p.stem for p in (BOARD / "results").glob("*.json"))


@pytest.mark.integration
def test_every_published_row_exports_valid_under_the_0_3_0_schema(schema):
    names = _published()
    assert len(names) >= 10
    for record in store.named_records(BOARD / "results", names):
        document = export.every_eval_ever(record, 1_800_000_000)
        assert _errors(schema, document) == [], record["name"]
        results = document["evaluation_results"]
        assert results and results[0]["evaluation_result_id"] == "calbench/calibration_score"
        for result in results:
            config, details = result["metric_config"], result["score_details"]["details"]
            assert isinstance(config["lower_is_better"], bool)
            assert "min_score" in config and "max_score" in config
            assert details["samples_per_prompt"] and json.loads(details["seeds"]) is not None
        by_id = {r["evaluation_result_id"]: r for r in results}
        if "calbench_numeric_unseen/pit_w1" in by_id:
            config = by_id["calbench_numeric_unseen/pit_w1"]["metric_config"]
            assert config["lower_is_better"] is True and config["min_score"] == 0.0 and config["max_score"] == 0.5


@pytest.mark.integration
def test_the_schema_check_can_fail(schema):
    (record,) = store.named_records(BOARD / "results", ["oracle"])
    document = export.every_eval_ever(record, time.time())
    del document["evaluation_results"][0]["metric_config"]["lower_is_better"]
    document["evaluation_results"][1]["metric_config"]["max_score"] = "lots"
    errors = _errors(schema, document)
    assert len(errors) >= 2, errors


def test_the_cli_writes_the_export(tmp_path, capsys):
    from calbench.cli import main

    out = tmp_path / "oracle.json"
    assert main(["leaderboard", "export", "oracle", "-o", str(out), "--results-dir", str(BOARD / "results")]) == 0
    document = json.loads(out.read_text())
    assert document["schema_version"] == "0.3.0" and document["model_info"]["name"] == "oracle"
    assert main(["leaderboard", "export", "no-such-row", "--results-dir", str(BOARD / "results")]) == 2
    assert "no-such-row" in capsys.readouterr().err


def test_a_card_gets_a_model_index_the_hub_reads(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    original = (BOARD / "adapters" / "smollm2-135m-instruct-soft" / "README.md").read_text()
    (adapter / "README.md").write_text(original)
    records = store.named_records(BOARD / "results", ["smollm2-135m-instruct-soft", "smollm2-135m-instruct-base"])
    first = card.write_card(adapter, records).read_text()
    assert card.write_card(adapter, records).read_text() == first  # written again: the same card
    front = yaml.safe_load(first.split("---\n")[1])
    assert front["library_name"] == "peft" and front["tags"] == ["calbench", "lora", "calibration"]  # kept
    (entry,) = front["model-index"]
    assert entry["name"] == "smollm2-135m-instruct-soft"
    (result,) = entry["results"]
    assert result["dataset"]["type"] == "calbench" and result["task"]["type"] == "text-generation"
    metrics = {m["type"]: m["value"] for m in result["metrics"]}
    scored = store.named_records(BOARD / "results", ["smollm2-135m-instruct-soft"])
    expected = export.model_index(scored[0])[0]["results"][0]["metrics"]
    assert metrics == {m["type"]: m["value"] for m in expected}
    assert 0 < metrics["calibration_score"] < 100 and 0 < metrics["valid_rate"] <= 1
    assert all(m["verified"] is False for m in result["metrics"])


@pytest.mark.parametrize("name", ["gemma-3-270m-soft", "smollm2-135m-instruct-hard-wide-long"])
def test_each_published_card_holds_its_rows_numbers(name):
    text = (BOARD / "adapters" / name / "README.md").read_text()
    (entry,) = yaml.safe_load(text.split("---\n")[1])["model-index"]
    metrics = {m["type"]: m["value"] for m in entry["results"][0]["metrics"]}
    headline = (BOARD / "README.md").read_text()
    row = next(line for line in headline.splitlines() if line.startswith("|") and f" {name} " in line)
    assert f"{metrics['calibration_score']:g}" in row  # the card's score is the board's
