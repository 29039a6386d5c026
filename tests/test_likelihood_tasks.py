"""Likelihood tasks through lm-eval: stock hf and calbench-hf agree, the oracle is exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from calbench.answer_tokens import answer_tokens, terminator
from calbench.backends.sampler import sample
from calbench.backends.tree_attention import score_trie
from calbench.families import FAMILIES, make_target
from calbench.metrics.likelihood import TokenLogprobs
from calbench.prompt import encode, prompt_text, render
from calbench.space import canonical_space
from calbench.trie import build_trie
from tests.helpers import evaluate_local, integration_except, load_model, load_tokenizer, pooled_chisquare

TASKS = ["calbench_numeric_unseen_likelihood", "calbench_numeric_heldout_likelihood"]
# The fast tier runs the 6 held-out families; the integration tier the 24 unseen ones too.
RUNS = integration_except("calbench_numeric_heldout_likelihood", TASKS)
PICK_A_TOKEN = "<|im_start|>user\nPick a token<|im_end|>\n<|im_start|>assistant\n"


def run(model, task, path=None, **kwargs):
    return evaluate_local(model, [task], path, **kwargs)


def calbench_hf(path):
    from calbench.backends.hf import CalbenchHFLM

    return CalbenchHFLM(pretrained=str(path), dtype="float32", device="cpu")


@pytest.mark.parametrize("model", ["tiny_split", "tiny_merge"])
@pytest.mark.parametrize("task", RUNS)
def test_calbench_hf_gives_stock_hf_numbers(model, task, request):
    path = request.getfixturevalue(model)
    chat = model == "tiny_split"  # tiny_merge is a base model: no template, a newline delimiter
    stock = run("hf", task, path, apply_chat_template=chat, limit=2, batch_size=64)
    fast = run("calbench-hf", task, path, apply_chat_template=chat, limit=2)
    worst = 0.0
    for a, b in zip(stock["samples"][task], fast["samples"][task], strict=True):
        assert len(a["resps"]) == len(b["resps"]) == len(a["doc"]["choices"]) + 1  # + the anchor
        for x, y in zip(a["resps"], b["resps"], strict=True):
            worst = max(worst, abs(x[0][0] - y[0][0]))
            assert x[0][1] == y[0][1]  # is_greedy
    assert worst < 1e-4
    s, f = stock["results"][task], fast["results"][task]
    for metric in ("seq_kl", "canonical_mass", "exact_w1"):
        assert f[f"{metric},none"] == pytest.approx(s[f"{metric},none"], rel=1e-4, abs=1e-12)
    assert "logit_kl,none" in f and "logit_kl,none" not in s  # per-token terms: calbench-hf only


def test_likelihood_conditions_on_the_sampling_prompt(tiny_split):
    # lm-eval scores "\n" + answer after "...assistant" (it moves the template's trailing
    # newline); subtracting the anchor must give calbench's own scoring after the full prompt.
    task = "calbench_numeric_heldout_likelihood"
    fast = run("calbench-hf", task, tiny_split, apply_chat_template=True, limit=1)
    sample = fast["samples"][task][0]
    lls = [r[0][0] for r in sample["resps"]]
    tok, model = load_tokenizer(tiny_split), load_model(tiny_split)
    target = make_target("bernoulli", {"p": 0.1})
    space = canonical_space(target)
    rendered = render(tok, prompt_text(target))
    end = terminator(tok, chat=True)
    trie = build_trie(answer_tokens(tok, rendered, space.strings, end), space.masses)
    mine = score_trie(model, encode(tok, rendered), trie).path_logprob(trie)
    np.testing.assert_allclose(np.array(lls[:-1]) - lls[-1], mine, atol=1e-4)
    # The last token of every answer is the model's end-of-turn token.
    raw = fast["samples"][task][0]["resps"][0][0][0]
    assert isinstance(raw, TokenLogprobs) and raw.token_ids[-1] == end


@pytest.mark.parametrize("task", RUNS)
def test_oracle_is_exact(task):
    r = run("calbench-oracle", task)["results"][task]
    families = [f for f in FAMILIES if f"seq_kl/{f},none" in r]
    assert len(families) == (24 if "unseen" in task else 6)
    for f in families:
        assert abs(r[f"seq_kl/{f},none"]) < 1e-9, f
        assert r[f"canonical_mass/{f},none"] == pytest.approx(1.0, abs=1e-9), f
        assert abs(r[f"logit_kl/{f},none"]) < 1e-9, f
        assert abs(r[f"exact_w1/{f},none"]) < 1e-9, f


def test_likelihood_task_needs_the_terminator():
    from calbench.harness import likelihood_docs

    with pytest.raises(ValueError, match="end-of-turn/EOS"):
        likelihood_docs()
    docs = likelihood_docs(calbench_split="heldout", calbench_terminator="<e>")["test"]
    assert docs[0]["choices"] == ["0<e>", "1<e>"]


def test_calbench_hf_sampling_keeps_every_repeat(tiny_split):
    r = run("calbench-hf", "calbench_numeric_quick", tiny_split, apply_chat_template=True, limit=3, num_samples=5)
    samples = r["samples"]["calbench_numeric_quick"]
    assert [len(s["resps"][0]) for s in samples] == [5, 5, 5]
    assert all(isinstance(x, str) for s in samples for x in s["resps"][0])


@torch.no_grad()
def test_calbench_hf_samples_from_the_model(tiny_split):
    # Shared prefill must not change the distribution: the first sampled token of 3000
    # repeats follows the model's own next-token probabilities (chi-square).
    from lm_eval.api.instance import Instance

    lm, context = calbench_hf(tiny_split), PICK_A_TOKEN
    kwargs = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 1}
    torch.manual_seed(0)
    requests = [Instance("generate_until", {}, (context, kwargs), 0) for _ in range(3000)]
    texts = lm.generate_until(requests, disable_tqdm=True)
    assert first_token_fit(lm, context, texts) > 1e-4


def first_token_fit(lm, context: str, texts: list[str]) -> float:
    """The chi-square p-value of one-token answers against the model's next-token law after context."""
    probs = torch.softmax(lm.model(torch.tensor([lm.tok_encode(context)])).logits[0, -1].double(), dim=-1).numpy()
    by_text: dict[str, float] = {}
    for token_id, p in enumerate(probs):
        text = lm.tok_decode([token_id])
        by_text[text] = by_text.get(text, 0.0) + p
    keys = sorted(by_text, key=lambda k: by_text[k], reverse=True)
    expected = np.array([by_text[k] for k in keys]) * len(texts)
    observed = np.array([sum(t == k for t in texts) for k in keys], dtype=float)
    return pooled_chisquare(observed, expected).pvalue  # the rare tokens pooled into one cell


@torch.no_grad()
def test_calbench_hf_decodes_distinct_contexts_side_by_side(tiny_split, monkeypatch):
    # A seeded prompt's requests each have their own context: they are decoded as one batch
    # (a batch of sampling_batch_size samples at most; a context's requests stay in one batch
    # unless they fill more than one), and each context's first token still
    # follows the model's next-token law after that context alone.
    from lm_eval.api.instance import Instance

    from calbench.backends import hf

    lm = calbench_hf(tiny_split)
    lm.sampling_batch_size = 2500
    calls: list[list[int]] = []
    real = hf.sample_many
    monkeypatch.setattr(hf, "sample_many", lambda m, p, c, *a: calls.append(c) or real(m, p, c, *a))
    contexts = [
        f"<|im_start|>user\nPick a token{tail}<|im_end|>\n<|im_start|>assistant\n" for tail in ("", " now", ", any one")
    ]
    kwargs = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 1}
    requests = [Instance("generate_until", {}, (c, kwargs), 0) for c in contexts for _ in range(1000)]
    torch.manual_seed(0)
    texts = lm.generate_until(requests, disable_tqdm=True)
    assert calls == [[1000, 1000], [1000]]  # in request order, a new batch where the next context does not fit
    for k, context in enumerate(contexts):
        assert first_token_fit(lm, context, texts[1000 * k : 1000 * (k + 1)]) > 1e-4
    # a batch's KV cache stays within sampling_cache_gb: here no two contexts fit, each runs alone
    calls.clear()
    lm.sampling_cache_gb = 1.5 * lm._cache_bytes(1000, len(lm.tok_encode(contexts[-1])) + 1) / 2**30
    assert len(lm.generate_until(requests, disable_tqdm=True)) == 3000
    assert calls == [[1000], [1000], [1000]]


@torch.no_grad()
def test_calbench_hf_other_settings_use_hf_generate(tiny_split):
    # top_k=3 is not plain softmax sampling: HF generate runs (on the shared prompt cache),
    # so every first token is one of the model's 3 most likely.
    from lm_eval.api.instance import Instance

    lm, context = calbench_hf(tiny_split), PICK_A_TOKEN
    kwargs = {"until": [], "do_sample": True, "temperature": 1.0, "top_k": 3, "max_gen_toks": 1}
    texts = lm.generate_until([Instance("generate_until", {}, (context, kwargs), 0) for _ in range(200)], True)
    logits = lm.model(torch.tensor([lm.tok_encode(context)])).logits[0, -1]
    top3 = {lm.tok_decode([int(t)]) for t in logits.topk(3).indices}
    assert set(texts) <= top3 and len(set(texts)) > 1


@torch.no_grad()
def test_shared_prefix_sampling_keeps_the_joint_law(tiny_split):
    # Prefix sharing splits counts multinomially: the second token, given the most common
    # first one, must still follow the model's conditional distribution.
    lm = calbench_hf(tiny_split)
    prompt = torch.tensor([lm.tok_encode("<|im_start|>user\nPick two<|im_end|>\n<|im_start|>assistant\n")])
    torch.manual_seed(1)
    samples = sample(lm.model, prompt, 20000, 2, 0.25, lm._stop_ids())  # sharper than the near-uniform tiny model
    firsts = [s[0] for s in samples]
    top = max(set(firsts), key=firsts.count)
    seconds = [s[1] for s in samples if s[0] == top and len(s) > 1]
    logits = lm.model(torch.cat([prompt, torch.tensor([[top]])], 1)).logits[0, -1].double()
    probs = torch.softmax(logits / 0.25, -1).numpy()
    expected = probs * len(seconds)
    observed = np.bincount(seconds, minlength=probs.size).astype(float)
    test = pooled_chisquare(observed, expected)
    assert len(seconds) > 200 and test.cells > 3 and test.pvalue > 1e-4
    assert len(samples) == 20000
