"""The offline retention suite: generators, checkers, mmlu_mini's data, the tasks, paired deltas."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from calbench import cli, lm_eval_io
from calbench.metrics import retention
from calbench.stats import paired_bootstrap, seed_for
from tests.helpers import plain_lm_eval

# ---------------------------------------------------------------- generators


def _sha(items: list[dict]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


# Pinned with retention.VERSION: a change to any item must bump it (and the tasks' versions).
GOLDEN = {
    "arithmetic": "0360d307a4434f2a46c7a6a6cb2d6609459a182bda08f5e155dd4919bf6bcc6e",
    "format_following": "ded5d12681c19f27c5155d3b95b66f86d4edc92e140d1632b5e9a0b45c9c1b6b",
}


def test_generators_are_pinned_to_their_version():
    assert retention.VERSION == 1
    assert _sha(retention.arithmetic_items(20, 0)) == GOLDEN["arithmetic"]
    assert _sha(retention.format_items(10, 0)) == GOLDEN["format_following"]


@pytest.mark.parametrize("make", [retention.arithmetic_items, retention.format_items])
def test_generators_are_deterministic_per_seed(make):
    assert make(5, 3) == make(5, 3)
    assert make(5, 3) != make(5, 4)
    assert len({item["id"] for item in make(5, 3)}) == len(make(5, 3))


def test_arithmetic_answers_are_right():
    items = retention.arithmetic_items(50, 1)
    assert [i["level"] for i in items[::50]] == list(retention.ARITHMETIC_LEVELS)
    for item in items:
        if item["level"] == "word_2step":
            assert isinstance(item["answer"], int) and item["answer"] > 0, item
            continue
        a, op, b = re.fullmatch(r"What is (\d+) (.) (\d+)\?", item["question"]).groups()
        digits = int(item["level"][-1])
        assert len(a) == len(b) == digits
        assert item["answer"] == {"+": int(a) + int(b), "-": int(a) - int(b), "\u00d7": int(a) * int(b)}[op]
        assert item["answer"] >= 0


def test_word_problems_divide_evenly_and_read_right():
    items = [i for i in retention.arithmetic_items(200, 2) if i["level"] == "word_2step"]
    shares = [i for i in items if "shared the rest equally" in i["question"]]
    assert shares and len(shares) < len(items)
    for item in shares:
        a, b, c = map(int, re.findall(r"\d+", item["question"]))
        assert (a - b) % c == 0 and item["answer"] == (a - b) // c
    box = next(i for i in items if "boxes" in i["question"])
    a, b, c = map(int, re.findall(r"\d+", box["question"]))
    assert box["answer"] == a * b + c


# ---------------------------------------------------------------- answers and checkers


@pytest.mark.parametrize(
    ("response", "strict", "flexible"),
    [
        ("42", 42, "42"),
        (" 42\n", 42, "42"),
        ("-7", -7, "-7"),
        ("42.", None, "42"),  # a near miss for strict: the period
        ("The answer is 1,234.", None, "1234"),
        ("It costs $56", None, "56"),
        ("3 + 4 = 7", None, "7"),  # flexible takes the last number
        ("3.5", None, "3.5"),
        ("forty-two", None, None),
        ("<think>maybe 41</think>42", 42, "42"),
    ],
)
def test_number_extraction(response, strict, flexible):
    assert retention.strict_number(response) == strict
    assert retention.flexible_number(response) == flexible


def test_arithmetic_scores():
    assert retention.arithmetic_scores("1234", 1234) == {"exact_strict": 1.0, "exact_flexible": 1.0}
    assert retention.arithmetic_scores("So it is 1,234.", 1234) == {"exact_strict": 0.0, "exact_flexible": 1.0}
    assert retention.arithmetic_scores("1233", 1234) == {"exact_strict": 0.0, "exact_flexible": 0.0}


MCQ_OK = "Question: Which?\nA. one\nB. two\nC. three\nD. four\nCorrect Answer: B\nExplanation: because."

# (kind, args, response, strict, loose): compliant answers, non-compliant ones and near misses
CASES = [
    ("word_count", {"n": 5}, "The sea is very deep.", True, True),
    ("word_count", {"n": 5}, "The sea is deep.", False, False),  # one short
    ("word_count", {"n": 3}, "It's well-known, truly.", True, True),  # contractions and hyphens: one word
    ("word_count", {"n": 2}, "Here you go:\nBlue waves", False, True),  # only without the first line
    ("line_count", {"n": 2}, "first\nsecond", True, True),
    ("line_count", {"n": 2}, "first\n\nsecond\n", True, True),  # blank lines do not count
    ("line_count", {"n": 2}, "first\nsecond\nthird", False, True),  # loose drops a line
    ("line_count", {"n": 4}, "one\ntwo\nthree", False, False),
    ("lowercase", {}, "all quiet here.", True, True),
    ("lowercase", {}, "all quiet in Paris.", False, False),
    ("lowercase", {}, "Sure!\nall quiet here.", False, True),
    ("lowercase", {}, "123 !", False, False),  # no letters: nothing was written in lowercase
    ("uppercase", {}, "LOUD AND CLEAR", True, True),
    ("uppercase", {}, "LOUD AND CLEAr", False, False),
    ("end_word", {"word": "river"}, "We walked along the river", True, True),
    ("end_word", {"word": "river"}, "We walked along the River", True, True),  # case aside, as IFEval
    ("end_word", {"word": "river"}, "We walked along the river.", False, False),  # something after it
    ("end_word", {"word": "river"}, "We walked along the river\n*Done*", False, True),
    ("json_key", {"key": "mood"}, '{"mood": "calm"}', True, True),
    ("json_key", {"key": "mood"}, '```json\n{"mood": "calm"}\n```', True, True),
    ("json_key", {"key": "mood"}, '{"Mood": "calm"}', False, False),  # the key is case-sensitive
    ("json_key", {"key": "mood"}, '["mood"]', False, False),  # not an object
    ("json_key", {"key": "mood"}, 'Here it is:\n{"mood": "calm"}', False, True),
    ("include_word", {"word": "golden"}, "A golden light.", True, True),
    ("include_word", {"word": "golden"}, "A goldenrod field.", False, False),  # a longer word
    ("avoid_word", {"word": "ocean"}, "The sea is wide.", True, True),
    ("avoid_word", {"word": "ocean"}, "The Ocean is wide.", False, False),
    ("avoid_word", {"word": "ocean"}, "Oceans are wide.", True, True),  # a different word
    ("mcq_format", {}, MCQ_OK, True, True),
    ("mcq_format", {}, MCQ_OK.replace("Correct Answer: B", "Correct Answer: E"), False, False),
    ("mcq_format", {}, "Sure, here it is:\n" + MCQ_OK, False, True),
    ("mcq_format", {}, MCQ_OK.replace("Question:", "**Question:**"), False, True),  # markdown: loose only
    ("mcq_format", {}, MCQ_OK.replace("\nExplanation: because.", ""), False, False),  # a line missing
]


@pytest.mark.parametrize(("kind", "args", "response", "strict", "loose"), CASES)
def test_checkers(kind, args, response, strict, loose):
    assert retention.follows(kind, args, response) == {"strict_acc": float(strict), "loose_acc": float(loose)}


def test_every_kind_has_cases_both_ways():
    assert {c[0] for c in CASES} == set(retention.FORMAT_KINDS) == set(retention.CHECKS)
    for kind in retention.FORMAT_KINDS:
        assert {c[3] for c in CASES if c[0] == kind} == {True, False}, kind


def test_format_prompts_state_their_instruction():
    for item in retention.format_items(3, 0):
        args = json.loads(item["args"])
        assert item["prompt"].endswith(retention.format_instruction(item["kind"], args))


# ---------------------------------------------------------------- mmlu_mini


def test_mmlu_mini_reads_the_installed_lm_eval():
    import lm_eval

    path = lm_eval_io.mmlu_file()
    assert path.is_relative_to(Path(lm_eval.__file__).parent)
    items, skipped = retention.mmlu_questions(lm_eval_io.mmlu_exemplars())
    assert len(items) == 281 and skipped == 1  # 282 exemplars; one answers (E), not one of A-D
    assert len({i["subject"] for i in items}) == 57
    assert all(len(i["choices"]) == 4 and 0 <= i["answer"] < 4 and i["question"] for i in items)
    tobacco = next(i for i in items if i["question"] == "Which element in tobacco smoke is responsible for cancers?")
    assert tobacco["choices"] == ["Nicotine", "Tar", "Carbon monoxide", "Smoke particles"] and tobacco["answer"] == 1


def test_mmlu_mini_names_the_missing_file(monkeypatch, tmp_path):
    import lm_eval

    monkeypatch.setattr(lm_eval, "__file__", str(tmp_path / "lm_eval" / "__init__.py"))
    with pytest.raises(FileNotFoundError, match=r"_cot_prompts\.json is missing"):
        retention.mmlu_questions(lm_eval_io.mmlu_exemplars())


def test_mmlu_parser_on_a_hand_written_file(tmp_path):
    text = (
        "The following are multiple choice questions (with answers) about x.\n\n"
        "Q: What is 1+1?\n(A) 1 (B) 2 (C) 3 (D) 4\nA: Let's think step by step. The answer is (B).\n\n"
        "Q: No options here\nA: The answer is (A).\n\n"
        "Q: Pick\n(A) a (B) b (C) c (D) d\nA: The answer is (E)."
    )
    (tmp_path / "p.json").write_text(json.dumps({"x": text}))
    items, skipped = retention.mmlu_questions(lm_eval_io.mmlu_exemplars(tmp_path / "p.json"))
    assert skipped == 2
    assert items == [
        {"id": "x/0", "subject": "x", "question": "What is 1+1?", "choices": ["1", "2", "3", "4"], "answer": 1}
    ]


# ---------------------------------------------------------------- paired deltas


def test_paired_bootstrap_by_hand():
    base, tuned = [1, 0, 1, 1, 0], [1, 1, 0, 1, 1]
    d = paired_bootstrap(base, tuned, seed=0)
    assert d.n == 5 and d.delta.value == pytest.approx(0.2)  # (0 + 1 - 1 + 0 + 1) / 5
    # the bootstrap SE of a mean of 5 differences {0, 1, -1, 0, 1}: sd * sqrt((n - 1) / n) / sqrt(n)
    diffs = np.array([0, 1, -1, 0, 1.0])
    assert d.delta.se == pytest.approx(diffs.std() / np.sqrt(5), rel=0.05)
    assert d.low < 0.2 < d.high
    same = paired_bootstrap([0.5, 0.2, 0.9], [0.5, 0.2, 0.9], seed=1)
    assert same.delta.value == 0 and same.delta.se == 0 and same.low == same.high == 0
    with pytest.raises(ValueError, match="one base and one tuned score per item"):
        paired_bootstrap([1, 0], [1], seed=0)


def _run(folder, task, scores, stamp="2026-01-01T00-00-00.000000"):
    """A results file and samples log of a mean-aggregated task with these per-item scores."""
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "results": {task: {"acc,none": float(np.mean(scores)), "acc_stderr,none": 0.1}},
        "configs": {task: {}},
    }
    (folder / f"results_{stamp}.json").write_text(json.dumps(results))
    lines = [json.dumps({"doc_id": i, "doc_hash": f"h{i}", "filter": "none", "acc": s}) for i, s in enumerate(scores)]
    (folder / f"samples_{task}_{stamp}.jsonl").write_text("\n".join(lines) + "\n")
    return folder / f"results_{stamp}.json"


def test_retention_delta_pairs_items(tmp_path, capsys):
    base = _run(tmp_path / "b", "tinyArc", [1, 0, 1, 1, 0])
    tuned = _run(tmp_path / "t", "tinyArc", [1, 1, 0, 1, 1])
    assert cli.main(["retention-delta", str(base), str(tuned)]) == 0
    out = capsys.readouterr().out
    expected = paired_bootstrap([1, 0, 1, 1, 0], [1, 1, 0, 1, 1], seed=seed_for("tinyArc", "acc"))
    row = next(line for line in out.splitlines() if line.startswith("| tinyArc"))
    assert "| 5 " in row and f"[{expected.low:.3g}, {expected.high:.3g}]" in row and "0.2 ±" in row


def test_retention_delta_from_records_equals_the_one_from_samples_logs(tmp_path, capsys):
    from calbench.leaderboard.records import store

    base = _run(tmp_path / "b", "tinyArc", [1, 0, 1, 1, 0, 1])
    tuned = _run(tmp_path / "t", "tinyArc", [1, 1, 0, 1, 1, 0])
    store_dir = tmp_path / "store"
    for name, results in (("base-model", base), ("tuned-model", tuned)):
        store.add_record(name, "base", [results], "calbench eval ...", store_dir)
    assert cli.main(["retention-delta", str(base), str(tuned)]) == 0
    from_logs = capsys.readouterr().out
    assert cli.main(["retention-delta", "base-model", "tuned-model", "--results-dir", str(store_dir)]) == 0
    from_names = capsys.readouterr().out
    assert cli.main(["retention-delta", str(store_dir / "base-model.json"), str(store_dir / "tuned-model.json")]) == 0
    from_files = capsys.readouterr().out
    assert "| tinyArc" in from_logs and from_logs == from_names == from_files
    assert cli.main(["retention-delta", "base-model", "nobody", "--results-dir", str(store_dir)]) == 2
    assert "no run record named nobody" in capsys.readouterr().err


def test_retention_delta_refuses_different_items(tmp_path, capsys):
    base = _run(tmp_path / "b", "tinyArc", [1, 0, 1])
    tuned = _run(tmp_path / "t", "tinyArc", [1, 1, 0, 1])  # --limit differs
    assert cli.main(["retention-delta", str(base), str(tuned)]) == 2
    assert "tinyArc: the two runs scored different items" in capsys.readouterr().err


def test_retention_delta_names_a_missing_log(tmp_path, capsys):
    base = _run(tmp_path / "b", "tinyArc", [1, 0])
    tuned = _run(tmp_path / "t", "tinyArc", [1, 1])
    next((tmp_path / "t").glob("samples_*")).unlink()
    assert cli.main(["retention-delta", str(base), str(tuned)]) == 2
    assert "no samples log" in capsys.readouterr().err


# ---------------------------------------------------------------- the tasks, end to end

TASKS = ["calbench_arithmetic", "calbench_format_following", "calbench_mmlu_mini"]


@pytest.mark.integration
def test_retention_tasks_run_on_plain_lm_eval(tiny_split, tmp_path):
    extra = ["--limit", "4", "--batch_size", "8", "--gen_kwargs", "max_gen_toks=8"]
    done = plain_lm_eval(tiny_split, "calbench_retention_offline", tmp_path, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = tmp_path.rglob("results_*.json")
    found = json.loads(results.read_text())["results"]
    assert set(found) >= set(TASKS)
    assert (
        "exact_flexible,none" in found["calbench_arithmetic"]
        and "exact_strict/add_1,none" in found["calbench_arithmetic"]
    )
    assert "loose_acc/word_count,none" in found["calbench_format_following"]
    assert 0 <= found["calbench_mmlu_mini"]["acc,none"] <= 1
    # paired deltas of a run against itself: every delta 0
    assert cli.main(["retention-delta", str(results), str(results)]) == 0


@pytest.mark.integration
def test_retention_tasks_on_calbench_hf_match_stock_hf(tiny_split):
    # Greedy decoding through calbench's sampler (side by side) gives HF generate's answers.
    from tests.helpers import evaluate_local

    kwargs = {"limit": 6, "apply_chat_template": True, "gen_kwargs": "max_gen_toks=12"}
    ours = evaluate_local("calbench-hf", TASKS, tiny_split, **kwargs)
    stock = evaluate_local("hf", TASKS, tiny_split, **kwargs)
    for task in TASKS[:2]:
        assert [s["resps"] for s in ours["samples"][task]] == [s["resps"] for s in stock["samples"][task]], task
    for a, b in zip(ours["samples"]["calbench_mmlu_mini"], stock["samples"]["calbench_mmlu_mini"], strict=True):
        assert a["acc"] == b["acc"]
        np.testing.assert_allclose([r[0][0] for r in a["resps"]], [r[0][0] for r in b["resps"]], atol=1e-4)
