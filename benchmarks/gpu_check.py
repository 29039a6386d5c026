"""calbench's own kernels on a GPU: tree attention, the sampler and the training losses.

Random-weight models of two real architectures (SmolLM2-135M's Llama and Qwen3-0.6B's
configs, written below; nothing is downloaded) are checked in each ``--dtypes`` on
``--device``:

1. tree attention (``score_trie``, default chunk and chunks of 4 nodes) against one plain
   forward per continuation, on a trie of random continuations after a random prompt:
   max |Δ log-prob| over its edges. fp32 must agree with the plain fp32 forward within
   ``TREE_FP32_TOL``; bf16 must be within ``TREE_BF16_FACTOR`` times stock bf16's own error
   (plain bf16 against plain fp32), since two bf16 paths round differently;
2. the sampler (``sample_many``, 2 tokens a sample) against the softmax of stock logits: the
   first tokens, and the second tokens after the commonest first one, in ``LAW_BINS`` cells
   of equal probability; chi-square p-value above ``CHI2_MIN_P``. Random weights give
   near-uniform laws (perplexity near the vocabulary size), under which an off-by-one token
   or a wrong temperature is invisible, so samples are drawn at the temperature that gives
   the law a perplexity of ``LAW_PERPLEXITY`` (peaked, like a trained model's);
3. one fixed batch per training method (soft path, hard, full trie: ``CalibrationTrainer``'s
   own ``compute_loss``, LoRA r=16 on q,k,v,o with seeded nonzero weights so both A and B
   get gradients) against the same batch on the CPU in fp32: relative loss difference
   below ``LOSS_RTOL`` and cosine of the flattened LoRA gradients above ``GRAD_MIN_COS``;
4. throughput: tree scoring of a training prompt's 1001-string canonical space (tokens/s),
   sampling (samples/s) and one training step per method (s), median of ``--repeats``.

The training prompts are tokenized by calbench's tiny test tokenizer (trained here, offline),
whose ids fit every vocabulary. Needs torch, transformers, peft, accelerate and calbench
(no lm-eval, no vLLM, no weights, no network). Ends with ``gpu_check: all checks passed``
(exit 0) or ``gpu_check: N checks failed`` (exit 1).

    python benchmarks/gpu_check.py [--device cuda] [--dtypes bf16 fp32] [--repeats 3]
    python benchmarks/gpu_check.py --tiny --device cpu   # 2-layer shrunken models, seconds on a CPU
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen3Config, TrainingArguments
from transformers.configuration_utils import PretrainedConfig

from calbench.backends.sampler import sample_many
from calbench.backends.tree_attention import score_trie
from calbench.tiny import build_tiny_model
from calbench.training.data import FullTrieCollator, HardCollator, SoftPathCollator, TrainingSet
from calbench.training.methods import METHODS
from calbench.training.trainer import CalibrationTrainer
from calbench.trie import Trie, build_trie

ARCHITECTURES: dict[str, tuple[type[PretrainedConfig], dict[str, Any]]] = {
    "smollm2-135m": (
        LlamaConfig,
        {
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "rope_theta": 100000.0,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-5,
        },
    ),
    "qwen3-0.6b": (
        Qwen3Config,
        {
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "rope_theta": 1000000.0,
            "tie_word_embeddings": True,
            "rms_norm_eps": 1e-6,
        },
    ),
}
# --tiny: 2 layers, heads of 8 dims (hidden = heads x 8), the same head and KV-head counts.
TINY = {"num_hidden_layers": 2, "head_dim": 8, "intermediate_size": 128, "vocab_size": 1024}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}

TREE_FP32_TOL = 1e-4  # max |Δ log-prob|, tree fp32 against plain fp32
TREE_BF16_FACTOR = 3.0  # tree bf16's error (against plain fp32) at most this times plain bf16's
CHI2_MIN_P = 1e-4
LAW_BINS = 20
LAW_PERPLEXITY = 64.0
LOSS_RTOL = {"fp32": 1e-4, "bf16": 2e-2}  # |loss - CPU fp32 loss| / |CPU fp32 loss|
GRAD_MIN_COS = {"fp32": 0.99, "bf16": 0.95}  # cosine of the LoRA gradients to CPU fp32's
DECIMALS, MAX_BINS, TRIE_ROW_NODES = 2, 40, 16  # the training batches' spaces; rows of 16 nodes share a prompt


class Checks:
    """Prints one line per check and counts the failures."""

    def __init__(self) -> None:
        self.failed = 0

    def record(self, name: str, verdict: tuple[bool, str]) -> None:
        ok, detail = verdict
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


# ---- models -----------------------------------------------------------------------------


def architecture(name: str, tiny: bool) -> PretrainedConfig:
    cls, fields = ARCHITECTURES[name]
    if tiny:
        fields = fields | TINY | {"hidden_size": 8 * fields["num_attention_heads"], "max_position_embeddings": 512}
    return cls(**fields)


def reference_model(config: PretrainedConfig, seed: int) -> Any:
    """The random fp32 weights, on the CPU: every other copy loads them."""
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def copy_model(reference: Any, dtype: torch.dtype, device: torch.device) -> Any:
    """``reference``'s weights in a model built in ``dtype`` on ``device`` (its rotary buffers
    computed there in fp32, as ``from_pretrained(dtype=...)`` does; a cast would round them)."""
    with device:
        model = AutoModelForCausalLM.from_config(reference.config, dtype=dtype)
    model.load_state_dict(reference.state_dict())
    return model.eval()


def with_lora(model: Any, weights: dict[str, torch.Tensor] | None = None) -> tuple[Any, dict[str, torch.Tensor]]:
    """``model`` with LoRA adapters (fp32, as training keeps them), set to ``weights`` or, when
    none are given, to seeded random ones (nonzero B, so A gets a gradient too); returns both."""
    config = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )  # training's defaults, without dropout: both sides of a comparison must see the same network
    peft_model = get_peft_model(model, config, autocast_adapter_dtype=True)
    lora = {n: p for n, p in peft_model.named_parameters() if "lora_" in n}
    if weights is None:
        gen = torch.Generator().manual_seed(0)
        weights = {n: 0.02 * torch.randn(p.shape, generator=gen) for n, p in lora.items()}
    with torch.no_grad():
        for n, p in lora.items():
            p.copy_(weights[n])
    return peft_model.eval(), weights


# ---- 1. tree attention --------------------------------------------------------------------


def random_continuations(rng: np.random.Generator, vocab: int, n: int = 16, depth: int = 5) -> list[list[int]]:
    """Continuations of 1 to ``depth`` tokens that share prefixes (3 tokens possible per depth),
    each ended by token 0, which occurs nowhere else (so none is a prefix of another)."""
    pool = rng.integers(1, vocab, size=(depth, 3))
    seqs = {tuple(pool[np.arange(k), rng.integers(0, 3, size=k)].tolist()) for k in rng.integers(1, depth + 1, size=n)}
    return [[*s, 0] for s in sorted(seqs)]


@torch.no_grad()
def plain_edges(model: Any, prompt: Sequence[int], trie: Trie) -> np.ndarray:
    """Every edge's log-probability from one stock forward over prompt + continuation each."""
    device = next(model.parameters()).device
    edges = np.full(trie.n_nodes, np.nan)
    for path in trie.string_nodes():
        path = path[path >= 0]
        ids = torch.tensor([[*prompt, *trie.tokens[path].tolist()]], device=device)
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), dim=-1)
        edges[path] = (
            logp[torch.arange(path.size), torch.from_numpy(trie.tokens[path]).to(device)].double().cpu().numpy()
        )
    return edges


def max_delta(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.nanmax(np.abs(a[1:] - b[1:])))  # node 0 is the root: no edge


def tree_verdict(tree: np.ndarray, plain: np.ndarray, reference: np.ndarray, dtype: str) -> tuple[bool, str]:
    """Tree attention against the plain forward in the same dtype and against plain fp32."""
    own, error = max_delta(tree, plain), max_delta(tree, reference)
    detail = f"max |Δ log-prob| {own:.2e} vs plain {dtype}, {error:.2e} vs plain fp32"
    if dtype == "fp32":
        return error <= TREE_FP32_TOL, f"{detail} (tol {TREE_FP32_TOL:g})"
    bound = TREE_BF16_FACTOR * max_delta(plain, reference)
    return error <= bound, f"{detail} (tol {TREE_BF16_FACTOR:g} x plain bf16's own {bound / TREE_BF16_FACTOR:.2e})"


# ---- 2. the sampler -----------------------------------------------------------------------


def law_verdict(tokens: torch.Tensor, probs: torch.Tensor, bins: int = LAW_BINS) -> tuple[bool, str]:
    """Chi-square of sampled ``tokens`` against ``probs`` over ``bins`` cells of about equal mass
    (tokens by decreasing probability; cells expecting fewer than 5 pooled into one)."""
    n = tokens.numel()
    probs = probs.double().cpu()
    order = probs.argsort(descending=True)
    start = probs[order].cumsum(0) - probs[order]  # mass before each token, in that order
    cell = torch.empty_like(order)
    cell[order] = (start * bins).floor().long().clamp_max(bins - 1)
    expected = torch.zeros(bins, dtype=torch.float64).index_add_(0, cell, probs) * n
    observed = torch.bincount(cell[tokens.cpu()], minlength=bins).double()
    small = expected < 5
    expected = torch.cat([expected[~small], expected[small].sum()[None]])
    observed = torch.cat([observed[~small], observed[small].sum()[None]])
    keep = expected > 0
    chi2 = float(((observed - expected)[keep] ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    pvalue = float(torch.special.gammaincc(torch.tensor(dof / 2), torch.tensor(chi2 / 2)))
    tv = 0.5 * float((observed - expected).abs().sum()) / n
    detail = f"{n} samples, chi2 {chi2:.1f} on {dof} dof, p {pvalue:.3g} (min {CHI2_MIN_P:g}), TV {tv:.3f}"
    return pvalue > CHI2_MIN_P, detail


def peaked_temperature(logits: torch.Tensor, perplexity: float = LAW_PERPLEXITY) -> float:
    """The temperature T at which softmax(logits / T) has ``perplexity`` (bisection: entropy grows with T)."""
    low, high = 1e-4, 1e4
    for _ in range(60):
        mid = math.sqrt(low * high)
        logp = torch.log_softmax(logits.double() / mid, dim=-1)
        low, high = (mid, high) if float(-(logp.exp() * logp).sum()) < math.log(perplexity) else (low, mid)
    return math.sqrt(low * high)


@torch.no_grad()
def next_probs(model: Any, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(model(input_ids=ids[None]).logits[0, -1].float() / temperature, dim=-1)


@torch.no_grad()
def sampler_checks(model: Any, prompt: torch.Tensor, n: int, label: str, checks: Checks) -> None:
    temperature = peaked_temperature(model(input_ids=prompt[None]).logits[0, -1].float())
    torch.manual_seed(1)
    samples = torch.tensor(sample_many(model, [prompt], [n], 2, temperature, set())[0])
    checks.record(
        f"{label} sampler first token (T={temperature:.3g})",
        law_verdict(samples[:, 0], next_probs(model, prompt, temperature)),
    )
    top = int(samples[:, 0].mode().values)
    after = samples[samples[:, 0] == top, 1]
    checks.record(
        f"{label} sampler second token after the commonest first",
        law_verdict(after, next_probs(model, torch.cat([prompt, prompt.new_tensor([top])]), temperature)),
    )


# ---- 3. training --------------------------------------------------------------------------


def training_batches(data: TrainingSet) -> dict[str, dict[str, Any]]:
    examples = data.examples[:2]
    return {
        "soft": SoftPathCollator(data, DECIMALS, MAX_BINS)(examples),
        "hard": HardCollator(data, DECIMALS, MAX_BINS)(examples),
        "soft-all": FullTrieCollator(data, DECIMALS, MAX_BINS, TRIE_ROW_NODES)(examples),
    }


def trainer_for(model: Any, device: torch.device, out: str) -> CalibrationTrainer:
    args = TrainingArguments(output_dir=out, use_cpu=device.type == "cpu", report_to=[])
    return CalibrationTrainer(model=model, args=args, method=METHODS["soft"], tau=1.0)


def loss_and_grads(trainer: CalibrationTrainer, method: str, batch: dict[str, Any]) -> tuple[float, torch.Tensor]:
    """The method's loss on ``batch`` (its own ``compute_loss``) and the flattened LoRA gradients
    (``method``: a key of ``training_batches``, the full-trie batch trained by the soft loss)."""
    model = trainer.model
    assert model is not None
    device = next(model.parameters()).device
    trainer.method = METHODS[method.removesuffix("-all")]
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()})
    loss.backward()
    grads = [p.grad.float().flatten().cpu() for n, p in model.named_parameters() if "lora_" in n and p.grad is not None]
    return float(loss.detach()), torch.cat(grads)


def gradient_verdict(
    loss: float, grads: torch.Tensor, ref_loss: float, ref_grads: torch.Tensor, dtype: str
) -> tuple[bool, str]:
    """A step against the CPU fp32 step: relative loss difference and gradient cosine."""
    rel = abs(loss - ref_loss) / abs(ref_loss)
    cos = float(torch.nn.functional.cosine_similarity(grads.double(), ref_grads.double(), dim=0))
    detail = (
        f"loss {loss:.6g} vs {ref_loss:.6g} (rel {rel:.1e}, max {LOSS_RTOL[dtype]:g}), "
        f"LoRA grad cosine {cos:.6f} (min {GRAD_MIN_COS[dtype]:g}), |g| {float(grads.norm()):.3g} vs {float(ref_grads.norm()):.3g}"
    )
    return rel <= LOSS_RTOL[dtype] and cos >= GRAD_MIN_COS[dtype] and grads.numel() == ref_grads.numel(), detail


# ---- 4. throughput ------------------------------------------------------------------------


def median_seconds(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls after one warm-up."""
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if r:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---- the run ------------------------------------------------------------------------------


@dataclass
class Fixture:
    """What every dtype of one architecture is checked on, and the references it is checked against."""

    reference: Any  # the random fp32 weights, on the CPU
    prompt: list[int]
    trie: Trie  # random continuations of ``prompt``
    plain_fp32: np.ndarray  # the trie's edges from plain fp32 forwards on the device
    batches: dict[str, dict[str, Any]]  # one per training method
    cpu_steps: dict[str, tuple[float, torch.Tensor]]  # their CPU fp32 loss and LoRA gradients
    lora: dict[str, torch.Tensor]


def fixture(name: str, args: argparse.Namespace, data: TrainingSet, out: str) -> Fixture:
    config = architecture(name, args.tiny)
    reference = reference_model(config, args.seed)
    size = sum(p.numel() for p in reference.parameters()) / 1e6
    print(f"{name}: {size:.1f}M parameters, vocab {config.vocab_size}", flush=True)
    rng = np.random.default_rng(args.seed)
    prompt = rng.integers(1, config.vocab_size, size=24).tolist()
    trie = build_trie(random_continuations(rng, config.vocab_size))
    plain_fp32 = plain_edges(copy_model(reference, torch.float32, torch.device(args.device)), prompt, trie)
    batches = training_batches(data)
    cpu_lora, lora = with_lora(copy_model(reference, torch.float32, torch.device("cpu")))
    cpu_trainer = trainer_for(cpu_lora, torch.device("cpu"), out)
    cpu_steps = {m: loss_and_grads(cpu_trainer, m, b) for m, b in batches.items()}
    return Fixture(reference, prompt, trie, plain_fp32, batches, cpu_steps, lora)


def check_dtype(
    name: str, dtype: str, fix: Fixture, args: argparse.Namespace, data: TrainingSet, checks: Checks, out: str
) -> str:
    """Every check of one architecture in one dtype; returns its throughput row."""
    device = torch.device(args.device)
    label = f"{name} {dtype} {device.type}"
    model = copy_model(fix.reference, DTYPES[dtype], device)
    plain = plain_edges(model, fix.prompt, fix.trie) if dtype != "fp32" else fix.plain_fp32
    for chunk in (None, 4):  # 4: a few nodes per chunk, so chunks read their ancestors' kept keys
        tree = score_trie(model, fix.prompt, fix.trie, chunk=chunk).edge_logprob
        checks.record(
            f"{label} tree attention ({fix.trie.n_nodes} nodes, chunk {chunk or 'default'})",
            tree_verdict(tree, plain, fix.plain_fp32, dtype),
        )
    ids = torch.tensor(fix.prompt, device=device)
    sampler_checks(model, ids, args.samples, label, checks)
    space = data.trie(0, 5, 1001)  # a training prompt's canonical space, as the likelihood tasks score it
    space_tokens = len(data.prompt_ids[0]) + space.inner().size - 1
    tree_s = median_seconds(lambda: score_trie(model, data.prompt_ids[0], space), args.repeats, device)
    sample_s = median_seconds(
        lambda: sample_many(model, [ids], [args.rate_samples], 16, 1.0, set()), args.repeats, device
    )
    trainer = trainer_for(with_lora(model, fix.lora)[0], device, out)
    step_s = []
    for method, batch in fix.batches.items():
        step = loss_and_grads(trainer, method, batch)
        checks.record(f"{label} training {method}", gradient_verdict(*step, *fix.cpu_steps[method], dtype))
        step_s.append(median_seconds(partial(loss_and_grads, trainer, method, batch), args.repeats, device))
    return f"{name:<13} {dtype:<5} {space_tokens / tree_s:>11,.0f} {args.rate_samples / sample_s:>10,.1f} " + " ".join(
        f"{s:>9.3f}" for s in step_s
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--models", nargs="+", choices=list(ARCHITECTURES), default=list(ARCHITECTURES))
    parser.add_argument("--tiny", action="store_true", help="2-layer models with a 1024-token vocabulary (CPU tests)")
    parser.add_argument("--samples", type=int, default=None, help="samples for the sampler's law (4000; 2000 --tiny)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions after one warm-up")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.samples = args.samples or (2000 if args.tiny else 4000)
    args.rate_samples = 32 if args.tiny else 512  # samples of 16 tokens per timed sampler call
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"gpu_check: device {args.device}, dtypes {' '.join(args.dtypes)}, tiny {args.tiny}, seed {args.seed}")
    print(
        f"torch {torch.__version__}, cuda {torch.version.cuda}, {torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}"
    )
    checks = Checks()
    rows = []
    with tempfile.TemporaryDirectory() as out:
        tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(out, seed=args.seed))
        data = TrainingSet(tokenizer, chat=True, repeats=1, epochs=1, seed=args.seed, prompts=4)
        for name in args.models:
            fix = fixture(name, args, data, out)
            for dtype in args.dtypes:
                rows.append(check_dtype(name, dtype, fix, args, data, checks, out))
                if args.device.startswith("cuda"):
                    torch.cuda.empty_cache()
    print(f"throughput on {args.device} (median of {args.repeats} after one warm-up)")
    print(f"{'model':<13} {'dtype':<5} {'tree tok/s':>11} {'samples/s':>10} {'soft s':>9} {'hard s':>9} {'trie s':>9}")
    print("\n".join(rows))
    print("gpu_check: all checks passed" if not checks.failed else f"gpu_check: {checks.failed} checks failed")
    return int(checks.failed > 0)


if __name__ == "__main__":
    sys.exit(main())
