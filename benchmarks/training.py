"""Training step costs: soft against hard targets, and the full trie against a plain pass.

On SmolLM2-135M-Instruct with LoRA (r=16 on q,k,v,o), measured side by side in one run:

1. a soft-target step (one sampled path per example) against a hard-target step at the
   same batch: collation, forward, backward; the issue asks for at most 1.15x;
2. a full-trie step (one prompt's whole trie: the prompt computed once, the trie's nodes in
   sub-trie rows after its cache, tree attention) against a plain causal forward and
   backward over as many tokens (prompt plus trie nodes), in rows of 64 tokens; the issue
   asks for at most 1.2x.

Each time is the median of ``--repeats`` steps after one warm-up. Ends with
``speedup <hard/soft>``, the soft step's speed relative to the hard step.

    python benchmarks/training.py [--batch 8] [--repeats 3] [--model smollm2-135m-instruct|tiny]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from calbench.training.config import TrainConfig
from calbench.training.trainer import build


def step_time(trainer, collator, examples, repeats: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Median seconds of collate + forward + backward on one batch, and its input tokens (with padding;
    the full trie's prompts included)."""
    model = trainer.model
    times = []
    batch = examples[: trainer.args.per_device_train_batch_size]
    for r in range(repeats + 1):
        start = time.perf_counter()
        inputs = collator(batch)
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        model.zero_grad(set_to_none=True)
        if r:  # the first step warms up
            times.append(time.perf_counter() - start)
    fed = int(inputs["input_ids"].numel()) + int(inputs["prompt_ids"].numel() if "prompt_ids" in inputs else 0)
    return statistics.median(times), fed


def trie_tokens(data, example, decimals: int, max_bins: int) -> int:  # type: ignore[no-untyped-def]
    """Prompt tokens plus the trie's inner nodes other than the root: the tokens the full trie feeds."""
    trie = data.trie(example.prompt, decimals, max_bins)
    return len(data.prompt_ids[example.prompt]) + trie.inner().size - 1


def plain_step(model, tokens: int, repeats: int, row: int = 64) -> float:  # type: ignore[no-untyped-def]
    """Median seconds of a causal forward + backward over ``tokens`` tokens in rows of ``row``."""
    ids = torch.randint(0, model.config.vocab_size, (-(-tokens // row), row))
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        model.zero_grad(set_to_none=True)
        if r:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a catalogue name, or 'tiny'")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model == "tiny":
            from calbench.tiny import build_tiny_model

            model = str(build_tiny_model(tmp))
        common = {"model": model, "output": tmp, "batch_size": args.batch, "effective_batch": args.batch}
        common |= {"prompts": 64, "use_cpu": True}
        results = {}
        for name, config in {
            "soft (sampled path)": TrainConfig(method="soft", **common),
            "hard (sampled answer)": TrainConfig(method="hard", **common),
            "soft (full trie, 1 prompt)": TrainConfig(method="soft", soft_paths="all", **common | {"batch_size": 1}),
        }.items():
            trainer, data = build(config.resolve())
            trainer.model.train()
            collator = trainer.data_collator
            results[name] = (*step_time(trainer, collator, data.examples, args.repeats), trainer.model)
    soft, _, _ = results["soft (sampled path)"]
    hard, tokens, _ = results["hard (sampled answer)"]
    trie, packed, trie_model = results["soft (full trie, 1 prompt)"]
    fed = trie_tokens(data, data.examples[0], config.decimals, config.resolve().max_bins)
    plain = plain_step(trie_model, fed, args.repeats)
    print(f"{args.model}, LoRA r=16 q,k,v,o, batch {args.batch}, CPU fp32 (median of {args.repeats} steps)")
    print(f"  hard step: {hard:6.2f} s  ({tokens} input tokens incl. padding)")
    print(f"  soft step: {soft:6.2f} s  -> soft / hard = {soft / hard:.2f}x (target <= 1.15)")
    print(f"  full-trie step: {trie:6.2f} s over {fed} tokens (prompt + trie nodes; {packed} fed with padding)")
    print(f"  plain fwd+bwd over {fed} tokens (rows of 64): {plain:6.2f} s -> {trie / plain:.2f}x (target <= 1.2)")
    print(f"speedup {hard / soft:.2f}")


if __name__ == "__main__":
    main()
