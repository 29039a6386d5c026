"""How a prompt reaches a model: chat template, thinking disabled, no double BOS."""

from __future__ import annotations

from calbench.families import make_target
from calbench.prompt import encode, prompt_text, render
from tests.helpers import load_tokenizer

PROMPT = prompt_text(make_target("poisson", {"lambda": 4}))


def test_chat_template_with_thinking_disabled(tiny_split):
    tok = load_tokenizer(tiny_split)
    rendered = render(tok, PROMPT)
    # The tiny template, like Qwen3's, writes an empty think block when thinking is off.
    assert rendered == f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_base_model_gets_the_bare_prompt_and_a_newline(tiny_merge):
    tok = load_tokenizer(tiny_merge)
    assert render(tok, PROMPT) == PROMPT + "\n"


def test_no_double_bos(tiny_split):
    from tokenizers.processors import TemplateProcessing

    tok = load_tokenizer(tiny_split)
    tok.bos_token = "<|endoftext|>"  # distinct from <|im_start|>, which every turn starts with
    bos = tok.bos_token_id
    # Make the tokenizer add BOS itself, as Llama 3 and Gemma tokenizers do...
    tok._tokenizer.post_processor = TemplateProcessing(
        single=f"{tok.bos_token} $A", special_tokens=[(tok.bos_token, bos)]
    )
    assert tok("x")["input_ids"][0] == bos
    # ...and give it a template that also writes BOS, as theirs do.
    tok.chat_template = "{{ bos_token }}" + tok.chat_template
    ids = encode(tok, render(tok, PROMPT))
    assert ids[0] == bos and ids[1] != bos
    plain = encode(tok, PROMPT + "\n")  # no template: the tokenizer adds the one BOS
    assert plain[0] == bos and plain.count(bos) == 1
