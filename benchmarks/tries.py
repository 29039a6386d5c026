"""Building answer tries: one 16384-string space, and all 1,988 training prompts.

For a real tokenizer (SmolLM2-135M-Instruct's, with its chat template) the script times
the whole path a training run takes per prompt: the canonical space, the answers
tokenized in context with the terminator, and the array trie. Targets from the issue:
one 16384-string space in under a second; all training prompts in under 20 s at 1001
strings and under 5 minutes at 16384 strings.

    python benchmarks/tries.py [--model smollm2-135m-instruct|tiny] [--skip-16384]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from transformers import AutoTokenizer

from calbench.answer_tokens import answer_tokens, terminator
from calbench.families import make_target, split_points
from calbench.prompt import prompt_text, render
from calbench.space import EVAL_MAX_BINS, HARD_MAX_BINS, canonical_space
from calbench.trie import build_trie


def build(tok, target, max_bins: int, end: int):  # type: ignore[no-untyped-def]
    space = canonical_space(target, 5, max_bins)
    rendered = render(tok, prompt_text(target))
    return build_trie(answer_tokens(tok, rendered, space.strings, end), space.masses)


def all_training(tok, max_bins: int, end: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    nodes = sum(build(tok, t, max_bins, end).n_nodes for t in split_points("train"))
    return time.perf_counter() - start, nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a catalogue name, or 'tiny'")
    parser.add_argument("--skip-16384", action="store_true", help="skip the 1,988 x 16384-string run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from calbench.tiny import build_tiny_model

            path = build_tiny_model(tmp)
        else:
            from calbench.model_catalogue import model_path

            path = model_path(args.model)
        tok = AutoTokenizer.from_pretrained(path)
    end = terminator(tok, chat=bool(tok.chat_template))
    gaussian = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    start = time.perf_counter()
    trie = build(tok, gaussian, HARD_MAX_BINS, end)
    one = time.perf_counter() - start
    print(f"{args.model}: one 16384-string space ({gaussian.key}): {one:.2f} s, {trie.n_nodes} nodes")
    t1001, n1001 = all_training(tok, EVAL_MAX_BINS, end)
    print(f"all 1,988 training prompts at 1001 strings: {t1001:.1f} s ({n1001 / 1988:.0f} nodes per trie)")
    if not args.skip_16384:
        t16k, n16k = all_training(tok, HARD_MAX_BINS, end)
        print(f"all 1,988 training prompts at 16384 strings: {t16k:.1f} s ({n16k / 1988:.0f} nodes per trie)")


if __name__ == "__main__":
    main()
