"""Sampling N answers to one prompt, under each protocol: stock lm-eval ``hf`` against ``calbench-hf``.

Both backends answer the same N generate_until requests (the tasks' settings: T=1, top_p 1,
top_k 0, stop at end-of-turn, the protocol's token budget) in one process, for each
protocol asked for (``calbench.protocols``): ``independent`` (the numeric tasks' prompt,
32 new tokens at most), ``batch`` (10 numbers per answer, 160 tokens), ``ssot`` (a random
string, then the number, 256 tokens) and ``seeded`` (N distinct contexts, one seed each).
Stock ``hf`` runs them in batches of ``--batch-size`` rows, each recomputing the prompt and
keeping finished rows in the batch until the whole batch has ended; ``calbench-hf``
computes a prompt once (distinct seeded prompts: their common prefix once), decodes all N
as one batch of distinct prefixes and drops finished ones. Prints samples per second for
each, the share of valid samples (the two should agree up to noise) and the tokens each
fed to the model, and ends each protocol with one line ``speedup <protocol> <ratio>``.

    python benchmarks/sampling.py [--protocols independent batch ssot seeded] [--n 1000] [--long-n 200]
        [--model smollm2-135m-instruct|tiny] [--peft ADAPTER]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from calbench.backends.hf import CalbenchHFLM
from calbench.families import make_target
from calbench.metrics.protocol_diagnostics import samples_of
from calbench.parse import classify
from calbench.protocols import PROTOCOLS, SEED_SLOT, protocol_text, seed_string

PURE = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
TARGET = make_target("gaussian", {"mu": 3.5, "sigma": 3})


def requests(lm: HFLM, protocol: str, n: int) -> list[Instance]:
    """n requests for one prompt of TARGET under ``protocol`` (seeded: n contexts, one seed each)."""
    text = protocol_text(protocol, TARGET)
    budget = PROTOCOLS[protocol].max_gen_toks
    context = lm.apply_chat_template([{"role": "user", "content": text}])
    contexts = [context.replace(SEED_SLOT, seed_string(0, "benchmark", i)) for i in range(n)]
    return [Instance("generate_until", {}, (c, {**PURE, "max_gen_toks": budget}), 0) for c in contexts]


def timed_generate(lm: HFLM, batch: list[Instance]) -> tuple[list[str], float, int]:
    """(answers, seconds, tokens fed to the model) of one generate_until call on an hf-style
    backend: tokens are counted at the input embeddings, which every decoding path feeds."""
    fed = [0]

    def count(_module: torch.nn.Module, args: tuple) -> None:
        fed[0] += args[0].numel()

    hook = lm.model.get_input_embeddings().register_forward_pre_hook(count)
    try:
        torch.manual_seed(0)
        start = time.perf_counter()
        answers = lm.generate_until(batch, disable_tqdm=True)
        return answers, time.perf_counter() - start, fed[0]
    finally:
        hook.remove()


def run(lm: HFLM, protocol: str, n: int) -> tuple[float, float, int]:
    """(samples per second, valid share of the samples, tokens fed to the model) for n requests."""
    answers, elapsed, fed = timed_generate(lm, requests(lm, protocol, n))
    items = samples_of(protocol, answers, TARGET)[0]
    valid = sum(classify(a, TARGET).valid for a in items) / len(items)
    return len(items) / elapsed, valid, fed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--protocols",
        nargs="+",
        default=["independent", "batch", "ssot", "seeded"],
        choices=list(PROTOCOLS),
        help="protocols to measure, in this order",
    )
    parser.add_argument("--n", type=int, default=1000, help="requests for the independent prompt")
    parser.add_argument("--long-n", type=int, default=200, help="requests for the other protocols (long answers)")
    parser.add_argument("--batch-size", type=int, default=64, help="stock hf batch size")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a catalogue name, or 'tiny'")
    parser.add_argument("--peft", default=None, help="a LoRA adapter folder to load on the model")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            from calbench.tiny import build_tiny_model

            path = str(build_tiny_model(tmp))
        else:
            from calbench.model_catalogue import model_path

            path = str(model_path(args.model))
        extra = {"peft": args.peft} if args.peft else {}
        stock = HFLM(pretrained=path, dtype="float32", device="cpu", batch_size=args.batch_size, **extra)
        fast = CalbenchHFLM(pretrained=path, dtype="float32", device="cpu", **extra)
        print(f"{args.model}{' + ' + args.peft if args.peft else ''}: one prompt ({TARGET.key})")
        for protocol in args.protocols:
            n = args.n if protocol == "independent" else args.long_n
            rate_stock, valid_stock, fed_stock = run(stock, protocol, n)
            rate_fast, valid_fast, fed_fast = run(fast, protocol, n)
            budget = PROTOCOLS[protocol].max_gen_toks
            print(f"{protocol}: {n} requests, {budget} new tokens at most")
            print(
                f"  stock hf (batch {args.batch_size}): {rate_stock:7.2f} samples/s, valid {valid_stock:.3f}, "
                f"{fed_stock:,} tokens fed"
            )
            print(
                f"  calbench-hf (shared prefixes):  {rate_fast:7.2f} samples/s, valid {valid_fast:.3f}, "
                f"{fed_fast:,} tokens fed"
            )
            print(f"speedup {protocol} {rate_fast / rate_stock:.1f}", flush=True)


if __name__ == "__main__":
    main()
