"""Sample-free enumeration against the likelihood task and against sampling, on SmolLM2.

For SmolLM2-135M-Instruct (base, and with the soft adapter when its folder exists) and a few
selected unseen prompts, one ``calbench-hf`` instance answers, side by side in one process:

* the enumeration request of ``calbench_numeric_unseen_exact`` (default budget: 2000
  prefixes, residual 1%, resolution 0.01 IQR): prefixes expanded, tokens fed, wall time,
  and the W1 error bound it reports;
* the likelihood task's requests for the same prompt (1001 canonical strings + terminator,
  the anchor): tokens fed (prompt + trie nodes) and wall time;
* sampling: ``--pilot`` answers with calbench-hf's sampler, the standard error of their W1
  as ``enum_w1`` defines it (both laws clipped to the law's window; 200 bootstrap
  resamples), and the answers sampling would need for a 95% half-width no wider than the
  enumerator's bound (floored at 0.001 IQR), n = pilot (1.96 sd / bound)^2, at the pilot's
  measured time per answer.

It prints one row per (model, prompt), the ratios, and a sweep of the budget (tolerance
and residual target) on the first prompt. Run it on an idle machine:

    python benchmarks/enumerate.py [--prompts 4] [--pilot 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lm_eval.api.instance import Instance

from calbench.answer_tokens import terminator
from calbench.backends.hf import CalbenchHFLM
from calbench.families import split_points
from calbench.harness import ENUMERATION_DEFAULTS, enumeration_settings
from calbench.metrics.enumeration import law_w1, score_enumeration
from calbench.metrics.sampling import iqr
from calbench.model_catalogue import model_path
from calbench.parse import classify
from calbench.prompt import prompt_text
from calbench.space import canonical_space
from calbench.trie import build_trie

GENERATION = json.loads(
    '{"until": [], "do_sample": true, "temperature": 1.0, "top_p": 1.0, "top_k": 0,'
    ' "repetition_penalty": 1.0, "max_gen_toks": 32}'
)
FAMILIES = ("gaussian", "exponential", "beta", "gamma", "lognormal", "uniform", "binomial", "poisson")
SWEEP_NODES = 4000
ADAPTER = Path(__file__).resolve().parents[1] / "leaderboards" / "adapters" / "smollm2-135m-instruct-soft"


def num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def enumerate_once(lm: CalbenchHFLM, context: str, target, nodes: int, residual: float, resolution: float):
    request = Instance(
        "enumerate_numeric_answers",
        {},
        (context, GENERATION, enumeration_settings(target, nodes, residual, resolution)),
        0,
    )
    (enum,), seconds = timed(lambda: lm.enumerate_numeric_answers([request], disable_tqdm=True))
    return enum, score_enumeration(target, enum), seconds


def likelihood_once(lm: CalbenchHFLM, context: str, target) -> tuple[int, float]:
    end = lm.tokenizer.convert_ids_to_tokens(terminator(lm.tokenizer, chat=True))
    answers = [s + end for s in canonical_space(target).strings] + [""]
    requests = [Instance("loglikelihood", {}, (context, a), i) for i, a in enumerate(answers)]
    pairs = [lm._encode_pair(*r.args) for r in requests]
    trie = build_trie([a for _, a in pairs if a], allow_prefixes=True)
    _, seconds = timed(lambda: lm.loglikelihood(requests, disable_tqdm=True))
    return len(pairs[0][0]) + trie.inner().size - 1, seconds


def sampling_once(lm: CalbenchHFLM, context: str, target, n: int) -> tuple[float, float, float]:
    """(clipped W1 of the valid answers, its bootstrap sd, seconds) for n answers."""
    requests = [Instance("generate_until", {}, (context, dict(GENERATION)), i) for i in range(n)]
    answers, seconds = timed(lambda: lm.generate_until(requests, disable_tqdm=True))
    values = np.array([a.value for a in (classify(x, target) for x in answers) if a.valid], dtype=float)
    if values.size < 2:
        return float("nan"), float("nan"), seconds
    rng = np.random.default_rng(0)
    counts = rng.multinomial(values.size, np.full(values.size, 1 / values.size), size=200)
    boot = [law_w1(values, c.astype(float), target) for c in counts]
    return law_w1(values, np.ones(values.size), target), float(np.std(boot, ddof=1)), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--pilot", type=int, default=200, help="answers sampled to measure W1's standard error")
    args = parser.parse_args()
    torch.manual_seed(0)
    base = str(model_path("smollm2-135m-instruct"))
    systems: dict[str, dict[str, Any]] = {"base": {}, **({"soft": {"peft": str(ADAPTER)}} if ADAPTER.exists() else {})}
    targets = [t for t in split_points("unseen", "selected") if t.family.name in FAMILIES][: args.prompts]
    ratios: dict[str, list[float]] = {"likelihood": [], "sampling": []}
    print("system | prompt | nodes | tokens | s | bound/IQR | likelihood tokens | s | sampling n | s | ratios")
    for name, extra in systems.items():
        lm = CalbenchHFLM(pretrained=base, dtype="float32", device="cpu", **extra)
        for target in targets:
            context = lm.apply_chat_template([{"role": "user", "content": prompt_text(target)}])
            d = ENUMERATION_DEFAULTS
            enum, record, t_enum = enumerate_once(lm, context, target, int(d["nodes"]), d["residual"], d["resolution"])
            l_tokens, t_like = likelihood_once(lm, context, target)
            sampled, sd, t_pilot = sampling_once(lm, context, target, args.pilot)
            bound = max(record["enum_w1_bound"] or 0.0, 1e-3 * iqr(target))
            needed = args.pilot * (1.96 * sd / bound) ** 2
            t_sampling = t_pilot * needed / args.pilot
            ratios["likelihood"].append(t_like / t_enum)
            ratios["sampling"].append(t_sampling / t_enum)
            print(
                f"{name} | {target.key} | {enum.nodes} | {enum.tokens_fed} | {t_enum:.1f} | "
                f"{num(record['enum_w1_iqr_bound'])} | {l_tokens} | {t_like:.1f} | {needed:.0f} | {t_sampling:.1f} | "
                f"likelihood/enum {t_like / t_enum:.2f}x, sampling/enum {t_sampling / t_enum:.1f}x "
                f"(enum_w1 {num(record['enum_w1'])}, sampled W1 {sampled:.4g} ± {sd:.2g} at n={args.pilot})"
            )
        if name == "base" and targets:
            target = targets[0]
            context = lm.apply_chat_template([{"role": "user", "content": prompt_text(target)}])
            print(
                f"budget sweep on {target.key} ({name}, at most {SWEEP_NODES} prefixes): resolution (IQR) | "
                "residual target | prefixes | s | residual left | resolved left | bound/IQR"
            )
            for resolution in (0.03, 0.01, 0.003):
                for residual in (0.02, 0.01):
                    enum, rec, seconds = enumerate_once(lm, context, target, SWEEP_NODES, residual, resolution)
                    print(
                        f"  {resolution} | {residual} | {enum.nodes} | {seconds:.1f} | {enum.residual_mass:.4f} | "
                        f"{enum.resolved_mass:.4f} | {num(rec['enum_w1_iqr_bound'])}"
                    )
    for key, values in ratios.items():
        print(f"{key} / enumeration, median over rows: {np.median(values):.2f}x")


if __name__ == "__main__":
    main()
