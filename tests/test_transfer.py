"""Transfer and retention tasks: open-ended generation, MCQ balance, NoveltyBench, drift."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from calbench import cli, drift, evaluation
from calbench.metrics import mcq, noveltybench, openended
from tests.helpers import evaluate_local, load_model, load_tokenizer

FIXTURES = Path(__file__).parent / "fixtures"

# ---------------------------------------------------------------- open-ended


def test_open_ended_prompts():
    prompts = openended.prompts()
    assert len(prompts) == 102 == len(set(prompts))
    assert prompts[0] == "Think of a random word. Output ONLY the answer."
    assert prompts[1].startswith("Choose a random first name.")
    assert all(p.endswith(". Output ONLY the answer.") for p in prompts)


@pytest.mark.parametrize(("p", "k"), [(0.5, 1), (0.8, 2), (0.9, 3), (0.95, 4), (0.99, 4)])
def test_support_size(p, k):
    assert openended.support_size(np.array([0.1, 0.5, 0.1, 0.3]), p) == k
    assert openended.support_size(np.array([1.0, 5.0, 1.0, 3.0]), p) == k  # unnormalised weights


def test_normalize_and_sample_stats():
    assert openended.normalize('  "Paris"\nthe capital') == "paris"
    assert openended.normalize("<think>hmm</think>\n  Blue   Whale ") == "blue whale"
    assert openended.normalize(" \n ") == ""
    s = openended.sample_stats(["Cat", "cat ", " dog", "", "*cat*"])
    assert s["unique_answers"] == 2
    assert s["top_answer_share"] == pytest.approx(3 / 4)
    assert s["answer_entropy"] == pytest.approx(-(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)))
    assert math.isnan(openended.sample_stats(["", " "])["top_answer_share"])


# ---------------------------------------------------------------- MCQ balance

GOOD = (
    "Question: Which vitamin deficiency causes scurvy?\nA. Vitamin A\nB. Vitamin B12\nC. Vitamin C\n"
    "D. Vitamin D\nCorrect Answer: C\nExplanation: Vitamin C is needed for collagen synthesis."
)


def test_strict_parser():
    assert mcq.parse_strict(GOOD) == "C"
    assert mcq.parse_strict("<think>plan</think>\n" + GOOD) == "C"
    assert mcq.parse_strict(GOOD.replace("Correct Answer: C", "Correct Answer: C.")) == "C"
    assert mcq.parse_strict("Sure! Here it is.\n" + GOOD) is None  # a preamble line
    assert mcq.parse_strict(GOOD.replace("Correct Answer: C", "Correct Answer: E")) is None
    assert mcq.parse_strict(GOOD.rsplit("\n", 1)[0]) is None  # no explanation
    assert mcq.parse_strict(GOOD.replace("D. Vitamin D", "A. Vitamin D")) is None  # A twice


@pytest.mark.parametrize(
    ("text", "letter"),
    [(GOOD, "C"), ("**Correct answer:** b", "B"), ("The correct answer is (D).", "D"), ("No answer here", None)],
)
def test_lenient_parser(text, letter):
    assert mcq.parse_lenient(text) == letter


def test_balance_matches_scipy():
    b = mcq.balance(["A", "A", "B", "C", None, "E"])
    assert b["parsed"] == 4
    assert (b["freq_A"], b["freq_B"], b["freq_C"], b["freq_D"]) == (0.5, 0.25, 0.25, 0.0)
    assert b["tv_distance"] == pytest.approx(0.25)
    assert b["chi2"] == pytest.approx(stats.chisquare([2, 1, 1, 0]).statistic)
    assert math.isnan(mcq.balance([None])["tv_distance"])


def test_bootstrap_tv_shrinks_with_n():
    rng = np.random.default_rng(1)
    small = mcq.bootstrap_tv(list(rng.choice(list(mcq.LETTERS), 100)))
    large = mcq.bootstrap_tv(list(rng.choice(list(mcq.LETTERS), 10000)))
    assert 0 < large < small / 5


# ---------------------------------------------------------------- NoveltyBench


def test_short_rule():
    assert noveltybench.short_rule("Paris", " paris") is True
    assert noveltybench.short_rule("the big cat", "big cat") is True  # 2 x 2 shared >= 3
    assert noveltybench.short_rule("New York City", "York") is False  # 2 x 1 shared < 3
    assert noveltybench.short_rule("one two three four five six", "one") is None


def test_rouge1_by_hand():
    # unigrams: the x2, cat, sat, on, mat | the, cat, lay, on, a, mat -> 4 shared of 6 and 6
    assert noveltybench.rouge1_f("The cat sat on the mat.", "the cat lay on a mat") == pytest.approx(2 / 3)
    assert noveltybench.rouge1_f("abc", "xyz") == 0.0


def test_partition_compares_with_first_members():
    # 1 ~ 2 and 2 ~ 3 but not 1 ~ 3: "3" opens a class, since only first members are compared.
    def near(a: str, b: str) -> bool:
        return abs(int(a) - int(b)) <= 1

    assert noveltybench.partition(["1", "2", "3", "4"], near) == [0, 0, 1, 1]


def test_lite_partition_distinct_and_utility_by_hand():
    answers = ["Paris", "paris", "Rome", "Paris.", "rome"]
    labels = noveltybench.partition(answers, noveltybench.lite_equivalent)
    assert labels == [0, 0, 1, 2, 1]  # "Paris." is another word to the short rule
    assert noveltybench.distinct(labels) == 3  # upstream's per-row field, max(partition), says 2
    assert noveltybench.distinct([0, 0, 0]) == 1 and noveltybench.distinct([]) == 0
    # scores: first members keep their rating, repeats 0 -> [5, 0, 7, 3, 0]
    w = 0.8 ** np.arange(5)
    expected = (5 * w[0] + 7 * w[2] + 3 * w[3]) / w.sum()
    assert noveltybench.utility(labels, [5, 9, 7, 3, 10]) == pytest.approx(expected)
    assert noveltybench.utility([0, 1, 2], [10, 10, 10]) == pytest.approx(10.0)


def test_rating_thresholds():
    assert noveltybench.rating(-20.0) == 1
    assert noveltybench.rating(-7.71875) == 1
    assert noveltybench.rating(-7.7) == 2
    assert noveltybench.rating(-3.0) == 9
    assert noveltybench.rating(5.0) == 10


def test_score_split_with_a_rater():
    items = [
        {"id": "a", "prompt": "p", "generations": ["x", "x", "y"]},
        {"id": "b", "prompt": "q", "generations": ["x", "y", "z"]},
    ]
    scored = noveltybench.score_split(items, lambda a, b: a == b, lambda prompt, gens: [10] * len(gens))
    assert [r["distinct"] for r in scored["prompts"]] == [2, 3]
    assert scored["summary"]["distinct"]["mean"] == 2.5
    w = 0.8 ** np.arange(3)
    assert scored["prompts"][0]["utility"] == pytest.approx(10 * (w[0] + w[2]) / w.sum())


# ---------------------------------------------------------------- lm-eval runs


def _run_chat(backend, model, tasks, num_samples, **kwargs):
    """An lm-eval run of calbench tasks on a local model with its chat template, on the CPU."""
    return evaluate_local(backend, tasks, model, num_samples=num_samples, apply_chat_template=True, **kwargs)


def _answer_counts(responses):
    """Non-empty normalized answers and how often each was given."""
    counts: dict[str, int] = {}
    for answer in map(openended.normalize, responses):
        if answer:
            counts[answer] = counts.get(answer, 0) + 1
    return counts


def _entropy_bits(responses):
    counts = _answer_counts(responses)
    n = sum(counts.values())
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


@pytest.mark.integration
def test_open_ended_support_matches_the_model(tiny_split):
    results = _run_chat("calbench-hf", tiny_split, ["calbench_open_ended"], 3, limit=1)
    r = results["results"]["calbench_open_ended"]
    tok, model = load_tokenizer(tiny_split), load_model(tiny_split)
    messages = [{"role": "user", "content": openended.prompts()[0]}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    with torch.no_grad():
        probs = model(torch.tensor([ids])).logits[0, -1].double().softmax(-1).numpy()
    for p in openended.SUPPORT_LEVELS:
        assert r[f"support_{round(p * 100)},samples"] == openended.support_size(probs, p)
    (sample,) = results["samples"]["calbench_open_ended"]
    assert len(sample["resps"][0]) == 3
    assert r["unique_answers,samples"] == len(_answer_counts(sample["resps"][0])) >= 1


@pytest.mark.integration
def test_open_ended_and_mcq_on_stock_hf(tiny_split):
    tasks = ["calbench_open_ended", "calbench_mcq_balance"]
    results = _run_chat("hf", tiny_split, tasks, 2, limit=2, batch_size=8, gen_kwargs="max_gen_toks=8")
    oe, q = results["results"]["calbench_open_ended"], results["results"]["calbench_mcq_balance"]
    assert "support_90,samples" not in oe  # the first-token distribution needs calbench-hf
    # Two samples per prompt: 0 or 1 bit each; the task reports the mean over the prompts.
    entropies = [_entropy_bits(s["resps"][0]) for s in results["samples"]["calbench_open_ended"]]
    assert len(entropies) == 2 and set(entropies) <= {0.0, 1.0}
    assert oe["answer_entropy,samples"] == pytest.approx(np.mean(entropies), abs=1e-12)
    assert q["parse_rate,samples"] == 0.0  # a random tiny model writes no question
    assert len(results["samples"]["calbench_mcq_balance"][0]["resps"][0]) == 2


@pytest.mark.integration
def test_noveltybench_on_local_fixture_and_cli_scorer(tiny_split, tmp_path, capsys):
    data = FIXTURES / "noveltybench_prompts.jsonl"
    results = _run_chat(
        "calbench-hf",
        tiny_split,
        ["calbench_noveltybench_curated"],
        4,
        output_path=tmp_path,
        metadata={"calbench_data_files": str(data)},
        gen_kwargs="max_gen_toks=6",
    )
    in_task = results["results"]["calbench_noveltybench_curated"]["distinct_lite,samples"]
    assert 1 <= in_task <= 4
    log = next(tmp_path.rglob("samples_calbench_noveltybench_curated_*.jsonl"))
    out = tmp_path / "scored.json"
    assert cli.main(["noveltybench", "score", str(log), "--output", str(out)]) == 0
    scored = json.loads(out.read_text())
    assert scored["scorer"] == "lite"
    assert scored["splits"]["curated"]["summary"]["distinct_lite"]["mean"] == pytest.approx(in_task)
    assert [r["id"] for r in scored["splits"]["curated"]["prompts"]] == ["fixture-1", "fixture-2", "fixture-3"]
    assert "curated: prompts 3" in capsys.readouterr().out


def test_noveltybench_fixed_subset_keeps_the_first_prompts():
    from calbench.harness.transfer import noveltybench_docs

    data = str(FIXTURES / "noveltybench_prompts.jsonl")
    everything = noveltybench_docs("curated", data)["test"]
    first = noveltybench_docs("curated", data, calbench_num_prompts=2)["test"]
    assert first["id"] == everything["id"][:2] and first["prompt"] == everything["prompt"][:2]
    for bad in (0, len(everything) + 1, 1.5, True):
        with pytest.raises(ValueError, match="calbench_num_prompts must be a whole number"):
            noveltybench_docs("curated", data, calbench_num_prompts=bad)


def test_noveltybench_score_rejects_other_logs(tmp_path, capsys):
    other = tmp_path / "samples_calbench_numeric_quick_2026.jsonl"
    other.write_text("{}\n")
    assert cli.main(["noveltybench", "score", str(other)]) == 2
    assert "not a samples log of calbench_noveltybench" in capsys.readouterr().err
    broken = tmp_path / "samples_calbench_noveltybench_wildchat_2026.jsonl"
    broken.write_text('{"doc": {}}\n')
    assert cli.main(["noveltybench", "score", str(broken)]) == 2
    assert ":1: not an lm-eval sample record" in capsys.readouterr().err


@pytest.mark.integration
def test_retention_group_is_indexed():
    tm = evaluation.task_manager(include_defaults=True)
    assert "calbench_retention" in tm.all_groups
    for task in ("tinyMMLU", "tinyGSM8k", "paloma_c4_en", "paloma_dolma-v1_5"):
        assert task in tm.all_tasks, task


# ---------------------------------------------------------------- drift


def _brute_force_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    p = p_logits.double().softmax(-1).numpy()
    q = q_logits.double().softmax(-1).numpy()
    return float(np.mean([stats.entropy(pi, qi) for pi, qi in zip(p, q, strict=True)]))


@pytest.mark.integration
def test_drift_of_an_adapter(tiny_split, tmp_path, capsys):
    from peft import LoraConfig, get_peft_model

    base = load_model(tiny_split)
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(tmp_path / "zero")  # LoRA's B starts at zero: the base model itself
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    peft_model.save_pretrained(tmp_path / "moved")

    assert drift.drift_of_adapter(str(tiny_split), str(tmp_path / "zero"))["drift_kl"] == pytest.approx(0, abs=1e-12)
    moved = drift.drift_of_adapter(str(tiny_split), str(tmp_path / "moved"))
    assert moved["drift_kl"] > 1e-4 and moved["drift_kl_se"] > 0

    tok = load_tokenizer(tiny_split)
    per_text = []
    for text in drift.NEUTRAL_TEXT:
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            tuned_logits = peft_model(ids).logits[0]
            with peft_model.disable_adapter():
                base_logits = peft_model(ids).logits[0]
        per_text.append(_brute_force_kl(base_logits, tuned_logits))
    assert moved["drift_kl"] == pytest.approx(np.mean(per_text), rel=1e-6)
    assert moved["drift_kl_se"] == pytest.approx(np.std(per_text, ddof=1) / np.sqrt(len(per_text)), rel=1e-5)

    assert cli.main(["drift", "--model", str(tiny_split), "--adapter", str(tmp_path / "moved")]) == 0
    assert "drift KL(base || tuned)" in capsys.readouterr().out
    assert cli.main(["drift", "--model", str(tiny_split), "--adapter", str(tmp_path)]) == 2
