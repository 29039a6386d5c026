"""Exact scoring of canonical answer spaces: stock lm-eval ``hf`` against ``calbench-hf``.

For each model (a tiny random one and SmolLM2-135M-Instruct) and a few selected
evaluation prompts (5 decimals, 1001 strings, each with the terminator, plus the anchor),
both backends answer the very same lm-eval loglikelihood requests in one process. The
script prints wall time, tokens computed, their ratio, the largest |Δ log-prob| between
the two, and the time of a plain batched forward pass over as many tokens as the prompt
plus the trie's nodes, in rows of 64 tokens (the cost floor of any exact method). It ends with one line
``speedup <ratio>`` (stock / calbench-hf on SmolLM2).

    python benchmarks/likelihood.py [--prompts 2] [--skip-smollm2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from calbench.answer_tokens import terminator
from calbench.backends.hf import CalbenchHFLM
from calbench.families import split_points
from calbench.prompt import prompt_text
from calbench.space import canonical_space
from calbench.trie import build_trie

FAMILIES = ("gaussian", "exponential", "beta", "gamma", "lognormal", "uniform")


def requests_for(lm: HFLM, n_prompts: int) -> list[list[Instance]]:
    """lm-eval's requests for the likelihood task: chat-templated context, answers + terminator, anchor."""
    targets = [t for t in split_points("unseen", "selected") if t.family.name in FAMILIES][:n_prompts]
    end = lm.tokenizer.convert_ids_to_tokens(terminator(lm.tokenizer, chat=True))
    out = []
    for t in targets:
        context = lm.apply_chat_template([{"role": "user", "content": prompt_text(t)}])
        answers = [s + end for s in canonical_space(t).strings] + [""]
        out.append([Instance("loglikelihood", {}, (context, a), i) for i, a in enumerate(answers)])
    return out


def tokens_stock(lm: HFLM, reqs: list[Instance]) -> int:
    """Tokens lm-eval's hf backend feeds the model: context + continuation per request."""
    pairs = [lm._encode_pair(*r.args) for r in reqs]
    return sum(len(c) + len(a) - 1 for c, a in pairs if a)


def trie_shape(lm: HFLM, reqs: list[Instance]) -> tuple[int, int, int]:
    """(prompt tokens, trie nodes, inner nodes) of one prompt's requests."""
    pairs = [lm._encode_pair(*r.args) for r in reqs]
    trie = build_trie([a for _, a in pairs if a], allow_prefixes=True)
    return len(pairs[0][0]), trie.n_nodes - 1, trie.inner().size - 1


@torch.no_grad()
def plain_forward(lm: HFLM, length: int, row: int = 64, repeats: int = 2) -> float:
    """Best time of a plain batched forward over ``length`` tokens: rows of ``row`` tokens,
    causal attention within a row, the logits of every position (in batches of 8 rows)."""
    ids = torch.randint(0, lm.tokenizer.vocab_size, (-(-length // row), row))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for batch in ids.split(8):
            lm.model(batch)
        best = min(best, time.perf_counter() - start)
    return best


def bench(name: str, path: str, n_prompts: int, batch_size: int) -> float:
    stock = HFLM(pretrained=path, dtype="float32", device="cpu", batch_size=batch_size)
    fast = CalbenchHFLM(pretrained=path, dtype="float32", device="cpu")
    prompts = requests_for(stock, n_prompts)
    t_stock = t_fast = 0.0
    toks_stock = toks_fast = 0
    worst = 0.0
    floor = 0.0
    for reqs in prompts:
        start = time.perf_counter()
        a = stock.loglikelihood(reqs, disable_tqdm=True)
        t_stock += time.perf_counter() - start
        start = time.perf_counter()
        b = fast.loglikelihood(reqs, disable_tqdm=True)
        t_fast += time.perf_counter() - start
        worst = max(worst, max(abs(x[0] - y[0]) for x, y in zip(a, b, strict=True)))
        prompt, nodes, inner = trie_shape(stock, reqs)
        toks_stock += tokens_stock(stock, reqs)
        toks_fast += prompt + inner
        floor += plain_forward(stock, prompt + nodes)
    n = len(prompts)
    print(f"\n{name}: {n} prompts x {len(prompts[0]) - 1} answers (5 decimals, 1001 bins, with terminator)")
    print(f"  stock hf     {t_stock / n:8.2f} s/prompt  {toks_stock / n:9.0f} tokens/prompt")
    print(f"  calbench-hf  {t_fast / n:8.2f} s/prompt  {toks_fast / n:9.0f} tokens/prompt")
    print(f"  plain batched forward over prompt + trie nodes (rows of 64): {floor / n:.2f} s/prompt")
    print(f"  speed ratio stock/calbench-hf: {t_stock / t_fast:.1f}x; tokens ratio {toks_stock / toks_fast:.1f}x")
    print(f"  calbench-hf / plain forward: {t_fast / floor:.2f}x")
    print(f"  largest |delta log-prob|: {worst:.2e}")
    return t_stock / t_fast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2, help="selected unseen prompts per model (stock hf is slow)")
    parser.add_argument("--batch-size", type=int, default=64, help="stock hf batch size")
    parser.add_argument("--skip-smollm2", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    from calbench.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        ratio = bench("tiny random Llama (digits split)", str(build_tiny_model(tmp)), args.prompts, args.batch_size)
    if not args.skip_smollm2:
        from calbench.model_catalogue import model_path

        ratio = bench("SmolLM2-135M-Instruct", str(model_path("smollm2-135m-instruct")), args.prompts, args.batch_size)
    print(f"speedup {ratio:.1f}")


if __name__ == "__main__":
    main()
