"""Tiny random causal LMs with locally trained tokenizers, for tests and benchmarks.

``build_tiny_model`` writes a Hugging Face folder (a 2-layer Llama with random weights
and a byte-level BPE trained here on calbench prompts and numbers) in about a second,
with no network; ``tiny_llama`` is its random model alone, for a tokenizer of your own. Two tokenizers cover the cases that matter for answer strings:

* ``digits="split"``: every digit is its own token, as in Qwen, SmolLM2 and Gemma 3;
* ``digits="merge"``: BPE merges digit runs into multi-digit tokens, as in GPT-2.

With ``chat=True`` the tokenizer carries a ChatML template (``<|im_start|>``/``<|im_end|>``,
honouring ``enable_thinking``) and ``<|im_end|>`` is its EOS, like SmolLM2-Instruct.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SHAPE: dict[str, Any] = {  # the tiny Llama's size: 2 layers, 64 wide, grouped-query attention
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
}


def _corpus(seed: int) -> list[str]:
    from calbench.families import split_points
    from calbench.prompt import prompt_text

    rng = random.Random(seed)
    texts = [prompt_text(t) for t in split_points("train")[::7]]
    texts += [f"{rng.gauss(0, 50):.{rng.randint(0, 5)}f} {rng.randint(-999, 9999)}" for _ in range(3000)]
    texts += ["user assistant system <think> </think> Question: Answer: A. B. C. D."] * 20
    return texts


def tiny_llama(vocab_size: int, seed: int = 0, **config: Any) -> Any:
    """A random Llama over ``vocab_size`` tokens, seeded: ``SHAPE`` with ``config`` over it (any
    ``LlamaConfig`` field: token ids, a smaller width, a larger ``initializer_range``, ...)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**{**SHAPE, "vocab_size": vocab_size, **config}))


def build_tiny_model(
    out_dir: str | Path,
    digits: Literal["split", "merge"] = "split",
    chat: bool = True,
    seed: int = 0,
    vocab_size: int = 640,
) -> Path:
    """Write a tiny random Llama and its tokenizer to ``out_dir`` and return the path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if digits == "split"
        else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(seed), trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>" if chat else "<|endoftext|>",
        eos_token="<|im_end|>" if chat else "<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    if chat:
        hf_tok.chat_template = CHATML
    hf_tok.save_pretrained(out)
    ids = {
        "bos_token_id": hf_tok.bos_token_id,
        "eos_token_id": hf_tok.eos_token_id,
        "pad_token_id": hf_tok.pad_token_id,
    }
    model = tiny_llama(len(hf_tok), seed, **ids)
    model.generation_config.do_sample = True
    model.save_pretrained(out)
    return out
