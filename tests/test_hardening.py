"""Smaller hardening cases: the parser on pathological input, direct targets, huge answers,
NoveltyBench logs, retention deltas over different documents, drift of a foreign adapter."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calbench import cli, drift, lm_eval_io
from calbench.families import FAMILIES, InvalidParametersError, Target, make_target
from calbench.metrics.prompt_scores import score_prompt
from calbench.parse import INTEGER_TOLERANCE, classify, parse_number, strip_think

# The definition strip_think keeps (its former implementation, quadratic on unclosed tags).
_CLOSED = re.compile(r"<think>.*?</think>", re.DOTALL)
_OPEN = re.compile(r"<think>.*\Z", re.DOTALL)


def reference_strip(text: str) -> str:
    return _OPEN.sub("", _CLOSED.sub("", text))


PIECES = st.sampled_from(["<think>", "</think>", "<think", "think>", "3", " ", "\n", "x", "<", ">", "/"])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_strip_think_keeps_its_definition(text):
    assert strip_think(text) == reference_strip(text)


@pytest.mark.parametrize(
    ("text", "stripped", "number"),
    [
        ("<think>" * 16_000, "", None),  # 112,000 characters of unclosed tags (7.8 s with the regex)
        ("<think>x</think>" * 8_000 + "<think>" * 8_000, "", None),
        ("<think>x</think>" * 8_000 + " 7 ", " 7 ", 7.0),
        ("</think>" * 14_000 + "7", "</think>" * 14_000 + "7", None),
        ("<think>" + "a" * 200_000, "", None),
    ],
)
def test_pathological_think_input_parses_in_one_pass(text, stripped, number):
    assert strip_think(text) == stripped
    assert parse_number(text) == number


def test_integer_tolerance_is_the_documented_one():
    binomial = make_target("binomial", {"n": 25, "p": 0.5})
    assert INTEGER_TOLERANCE == 1e-9
    assert classify("12.000000000001", binomial).value == 12.0 and classify("1.2e1", binomial).valid
    assert not classify("12.0001", binomial).valid and classify("12.0001", binomial).support_violation


def test_a_target_built_directly_is_validated_like_make_target():
    gaussian = FAMILIES["gaussian"]
    with pytest.raises(InvalidParametersError, match="sigma"):
        Target(gaussian, (("mu", 0.0), ("sigma", -1.0)))
    with pytest.raises(InvalidParametersError, match="missing sigma"):
        Target(gaussian, (("mu", 0.0),))
    assert Target(gaussian, (("sigma", 2), ("mu", 1))) == make_target("gaussian", {"mu": 1, "sigma": 2})


def test_answers_near_the_largest_float_keep_w1_finite():
    target = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    score = score_prompt(target, ["1e308", "1.7e308", "3.5", "1.79e308"])
    assert score.n_valid == 4
    assert math.isfinite(score.w1) and math.isfinite(score.w1_se)
    assert score.w1 == pytest.approx(1e308 / 4 + 1.7e308 / 4 + 1.79e308 / 4, rel=1e-3)
    assert math.isfinite(score.value("w1_iqr").value)


def _write_log(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_noveltybench_refuses_empty_logs_and_non_string_generations(tmp_path, capsys):
    empty = _write_log(tmp_path / "samples_calbench_noveltybench_curated_x.jsonl", [])
    with pytest.raises(ValueError, match="the samples log is empty"):
        lm_eval_io.noveltybench_items(lm_eval_io.noveltybench_log(empty)[1], str(empty))
    bad = _write_log(
        tmp_path / "samples_calbench_noveltybench_wildchat_x.jsonl",
        [{"doc": {"id": 1, "prompt": "p"}, "resps": [[1, 2, 3]]}],
    )
    with pytest.raises(ValueError, match=r":1: the generations \(resps\[0\]\) must be a list of strings"):
        lm_eval_io.noveltybench_items(lm_eval_io.noveltybench_log(bad)[1], str(bad))
    assert cli.main(["noveltybench", "score", str(empty)]) == 2
    assert "the samples log is empty" in capsys.readouterr().err


def test_drift_refuses_an_adapter_of_another_base(tmp_path, capsys):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/another-model"}))
    with pytest.raises(ValueError, match="was trained on org/another-model, not on org/this-model"):
        drift.drift_of_adapter("org/this-model", str(adapter))
    assert drift.same_model("/elsewhere/calbench/models/smollm2-135m-instruct", "smollm2-135m-instruct")
    assert not drift.same_model("org/a", "org/b")


class _Fixed(torch.nn.Module):
    """A model whose logits are given (for drift's arithmetic alone)."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids: torch.Tensor):
        class Out:
            logits = self.logits[None, : ids.shape[1]]

        return Out()


class _Tok:
    def __call__(self, text: str) -> dict:
        return {"input_ids": [0, 1, 2]}


def test_drift_never_reports_nan():
    good = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0]])
    same = drift.drift(_Fixed(good), _Fixed(good), _Tok(), texts=("a", "b"))
    assert same["drift_kl"] == 0.0 and same["drift_kl_se"] == 0.0
    broken = good.clone()
    broken[1, 0] = math.nan
    with pytest.raises(ValueError, match="drift is not finite"):
        drift.drift(_Fixed(good), _Fixed(broken), _Tok(), texts=("a", "b"))
    assert np.isfinite(list(same.values())).all()
