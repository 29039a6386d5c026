"""Sampling N answers to one prompt: stock lm-eval ``hf`` against ``calbench-hf``.

Both backends answer the same N identical generate_until requests (the numeric tasks'
settings: T=1, top_p 1, top_k 0, 32 new tokens at most, stop at end-of-turn) in one
process. Stock ``hf`` runs them in batches of ``--batch-size`` rows, each recomputing the
prompt and keeping finished rows in the batch until the whole batch has ended;
``calbench-hf`` computes the prompt once, decodes all N as one batch of distinct prefixes
and drops finished ones. Prints samples per second for each, the share of valid answers
(the two should agree up to noise) and the tokens each fed to the model, and ends with
one line ``speedup <ratio>``.

    python benchmarks/sampling.py [--n 1000] [--model smollm2-135m-instruct|tiny]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from calbench.families import make_target
from calbench.hf_backend import CalbenchHFLM
from calbench.parse import classify
from calbench.prompt import prompt_text

GEN_KWARGS = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 32}
TARGET = make_target("gaussian", {"mu": 3.5, "sigma": 3})


def run(lm: HFLM, n: int) -> tuple[float, float, int]:
    """(samples per second, valid share, tokens fed to the model) for n repeats of the prompt."""
    context = lm.apply_chat_template([{"role": "user", "content": prompt_text(TARGET)}])
    requests = [Instance("generate_until", {}, (context, dict(GEN_KWARGS)), 0) for _ in range(n)]
    fed = [0]

    def count(_module: torch.nn.Module, args: tuple) -> None:
        fed[0] += args[0].numel()

    hook = lm.model.get_input_embeddings().register_forward_pre_hook(count)  # every path feeds ids through it
    torch.manual_seed(0)
    start = time.perf_counter()
    answers = lm.generate_until(requests, disable_tqdm=True)
    elapsed = time.perf_counter() - start
    hook.remove()
    return n / elapsed, sum(classify(a, TARGET).valid for a in answers) / n, fed[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="samples of the one prompt")
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
        rate_stock, valid_stock, fed_stock = run(stock, args.n)
        rate_fast, valid_fast, fed_fast = run(fast, args.n)
    print(
        f"{args.model}{' + ' + args.peft if args.peft else ''}: {args.n} samples of one prompt ({TARGET.key}), 32 new tokens at most"
    )
    print(
        f"  stock hf (batch {args.batch_size}): {rate_stock:7.2f} samples/s, valid {valid_stock:.3f}, {fed_stock:,} tokens fed"
    )
    print(
        f"  calbench-hf (shared prefixes):  {rate_fast:7.2f} samples/s, valid {valid_fast:.3f}, {fed_fast:,} tokens fed"
    )
    print(f"speedup {rate_fast / rate_stock:.1f}")


if __name__ == "__main__":
    main()
