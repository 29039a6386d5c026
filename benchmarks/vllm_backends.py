"""N samples of one prompt on three engines, side by side: stock lm-eval ``hf``, ``calbench-hf``
and lm-eval's ``vllm`` backend, for the base model and with the soft adapter.

Every engine answers the same N generate_until requests, as lm-eval sends them for a numeric
task (the chat-templated Poisson(4) prompt; T=1, top_p 1, top_k off, stop at end of turn, 32 new
tokens at most). vLLM runs as lm-eval drives it (``batch_size=auto``: all N requests handed to
the engine at once; each request one sample, since lm-eval reads only a request's first output),
with the adapter as a LoRA (``lora_local_path``) and merged into the weights with peft. Engine
start (loading, KV-cache set-up) is timed apart from sampling. Printed per engine: samples per
second, the share of valid answers (the engines should agree up to noise), and tokens: those fed
to the model for hf and calbench-hf (counted at the input embeddings), and for vLLM the requests'
prompt plus generated tokens (what an engine without prefix caching would feed).

Run it in the vLLM environment (``bash .ci/vllm-cpu-env``), on an otherwise idle machine:

    . .venv-vllm/bin/activate && VLLM_CPU_KVCACHE_SPACE=2 python benchmarks/vllm_backends.py [--n 1000]
        [--hf-n 256] [--lora-n 200] [--engines hf calbench-hf vllm]

Samples per second do not depend on N once the engines' batches are full (stock hf: batches of
64; vLLM: its scheduler's), so ``--hf-n`` and ``--lora-n`` shorten the two slow engines' runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lm_eval.api.instance import Instance
from sampling import timed_generate  # benchmarks/sampling.py: this script's folder is on sys.path

from calbench import model_catalogue, tasks_path
from calbench.families import make_target
from calbench.parse import classify
from calbench.prompt import prompt_text

GEN = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 32}
TARGET = make_target("poisson", {"lambda": 4.0})
ADAPTER = Path(tasks_path()).parent / "leaderboards" / "adapters" / "smollm2-135m-instruct-soft"
ENGINE = {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048, "batch_size": "auto"}


def _requests(lm, n: int) -> list[Instance]:
    context = lm.apply_chat_template([{"role": "user", "content": prompt_text(TARGET)}])
    return [Instance("generate_until", {}, (context, dict(GEN)), i) for i in range(n)]


def _line(label: str, start_s: float, answers: list[str], elapsed: float, tokens: int) -> str:
    valid = sum(classify(a, TARGET).valid for a in answers) / len(answers)
    return (
        f"  {label:<28} {len(answers):>5} samples  start {start_s:6.1f} s  {len(answers) / elapsed:8.2f} samples/s  "
        f"valid {valid:.3f}  {tokens:>9,} tokens"
    )


def _hf_engine(cls: Callable, pretrained: str, adapter: str | None, n: int, label: str) -> str:
    t0 = time.perf_counter()
    lm = cls(
        pretrained=pretrained, dtype="float32", device="cpu", batch_size=64, **({"peft": adapter} if adapter else {})
    )
    start_s = time.perf_counter() - t0
    answers, elapsed, fed = timed_generate(lm, _requests(lm, n))
    del lm
    gc.collect()
    return _line(label, start_s, answers, elapsed, fed)


def _vllm_engine(pretrained: str, lora: str | None, n: int, label: str) -> str:
    from lm_eval.models.vllm_causallms import VLLM

    t0 = time.perf_counter()
    lm = VLLM(pretrained=pretrained, **({"lora_local_path": lora} if lora else {}), **ENGINE)
    start_s = time.perf_counter() - t0
    batch = _requests(lm, n)
    t0 = time.perf_counter()
    answers = lm.generate_until(batch, disable_tqdm=True)
    elapsed = time.perf_counter() - t0
    prompt = len(lm.tokenizer(batch[0].args[0], add_special_tokens=False).input_ids)
    generated = sum(len(lm.tokenizer(a, add_special_tokens=False).input_ids) + 1 for a in answers)  # + end of turn
    line = _line(label, start_s, answers, elapsed, prompt * n + generated)
    del lm
    gc.collect()
    return line


def _merged(pretrained: str, adapter: str, folder: str) -> str:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(pretrained), adapter).merge_and_unload()
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(pretrained).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="samples of the prompt per engine")
    parser.add_argument("--hf-n", type=int, default=None, help="samples on stock hf (default --n; 256 is 4 batches)")
    parser.add_argument(
        "--lora-n", type=int, default=None, help="samples on vLLM with LoRA (default --n; slow on a CPU)"
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a calbench catalogue name")
    parser.add_argument("--adapter", default=str(ADAPTER), help="a LoRA adapter folder")
    parser.add_argument(
        "--engines", nargs="+", default=["hf", "calbench-hf", "vllm"], choices=["hf", "calbench-hf", "vllm"]
    )
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from lm_eval.models.huggingface import HFLM

    from calbench.backends.hf import CalbenchHFLM

    pretrained = str(model_catalogue.model_path(args.model))
    print(time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime()))
    print(f"{args.model}: {args.n} samples of one prompt ({TARGET.key}), {GEN['max_gen_toks']} new tokens at most")
    with tempfile.TemporaryDirectory() as tmp:
        for name, adapter in (("base", None), ("soft adapter", args.adapter)):
            print(f"{name}:", flush=True)
            if "hf" in args.engines:
                print(_hf_engine(HFLM, pretrained, adapter, args.hf_n or args.n, "stock hf (batch 64)"), flush=True)
            if "calbench-hf" in args.engines:
                print(_hf_engine(CalbenchHFLM, pretrained, adapter, args.n, "calbench-hf"), flush=True)
            if "vllm" in args.engines:
                if adapter is None:
                    print(_vllm_engine(pretrained, None, args.n, "vllm (batch auto)"), flush=True)
                else:
                    print(
                        _vllm_engine(pretrained, adapter, args.lora_n or args.n, "vllm, LoRA (batch auto)"), flush=True
                    )
                    merged = _merged(pretrained, adapter, str(Path(tmp) / "merged"))
                    print(_vllm_engine(merged, None, args.n, "vllm, merged (batch auto)"), flush=True)
    print(time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime()))


if __name__ == "__main__":
    main()
