"""Retention-aware training: a KL(base ‖ tuned) term on generic text, beside the calibration loss.

Calibration training moves a model beyond the numbers it is trained on (both SmolLM2
adapters stopped following the MCQ format). ``--retain-weight λ`` adds to each step's loss

    λ · (1 / T) Σ_t KL(p_base(· | x_<t) ‖ p_tuned(· | x_<t)),

the mean over the T trained positions of a batch of generic texts, over the full vocabulary:
p_base is the same model with its adapter disabled (peft's ``disable_adapter``: no second copy
of the weights, no gradient), p_tuned the adapter being trained; a full fine-tune
(``--finetune full``) keeps a frozen copy of the base model's weights for p_base instead. A
zero-initialised LoRA adapter, or a full fine-tune before its first step, leaves the model
unchanged, so the term starts at exactly 0.

The texts (:func:`retain_prompts`): generic instructions from the offline retention suite's
generators (arithmetic word problems and format-following instructions) drawn with a seed
the evaluated items never use (the suite evaluates seed 0), so the term never trains on the
items that measure retention. Each is rendered as the training prompts are (one chat turn, or
the bare text and a newline) and followed by the base model's own greedy answer, generated
once before training (:meth:`RetainSet.prepare`): the positions trained are the answer's,
where the base model's behaviour is what the term keeps. Batches cycle through the texts in a
seeded order, so a resumed run sees the same ones.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
from tqdm.auto import tqdm

from calbench.metrics.retention import arithmetic_items, arithmetic_prompt, format_items
from calbench.prompt import encode, render

RETAIN_SEED = 1  # the offline retention suite evaluates the generators' seed 0
ANSWER_TOKENS = 48  # of the base model's greedy answer to each text


def retain_prompts(seed: int = RETAIN_SEED, per_kind: int = 4) -> list[str]:
    """Generic instructions: ``per_kind`` per arithmetic level and per format kind, each once,
    none of them an item the offline retention suite evaluates (a one-digit sum can repeat)."""
    evaluated = {arithmetic_prompt(item["question"]) for item in arithmetic_items()}
    evaluated |= {item["prompt"] for item in format_items()}
    drawn = [arithmetic_prompt(item["question"]) for item in arithmetic_items(per_kind, seed)]
    drawn += [item["prompt"] for item in format_items(per_kind, seed)]
    return [text for text in dict.fromkeys(drawn) if text not in evaluated]


def retain_kl(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    trained: torch.Tensor,
    peft_model: Any = None,
    base: Any = None,
) -> torch.Tensor:
    """Mean over the ``trained`` positions (bool, like ``input_ids``) of KL(p_base ‖ p_tuned).

    Position t's distribution is the next-token one after x_≤t. p_tuned comes from ``model``
    (with gradient; under DDP the wrapped model), p_base from ``base`` (a full fine-tune's frozen
    copy of the base model) or else from ``peft_model`` (default: ``model``) with its adapter
    disabled."""
    peft_model = model if peft_model is None else peft_model
    with torch.no_grad(), nullcontext() if base is not None else peft_model.disable_adapter():
        base_logits = (base if base is not None else peft_model)(
            input_ids=input_ids, attention_mask=attention_mask
        ).logits
    tuned = model(input_ids=input_ids, attention_mask=attention_mask).logits
    rows = trained.reshape(-1)
    log_p = torch.log_softmax(base_logits.reshape(-1, base_logits.shape[-1])[rows].float(), -1)
    log_q = torch.log_softmax(tuned.reshape(-1, tuned.shape[-1])[rows].float(), -1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


class RetainSet:
    """The retain texts of a run, tokenized, and a seeded, cycling batch order."""

    def __init__(self, tokenizer: Any, chat: bool, seed: int, prompts: Sequence[str] | None = None) -> None:
        self.tokenizer = tokenizer
        texts = list(retain_prompts() if prompts is None else prompts)
        self.prompt_ids = [encode(tokenizer, render(tokenizer, t) if chat else t + "\n") for t in texts]
        self.answers: list[list[int]] | None = None
        self.order = list(range(len(texts)))
        random.Random(seed).shuffle(self.order)

    @torch.no_grad()
    def prepare(self, model: Any, max_new_tokens: int = ANSWER_TOKENS) -> None:
        """The base model's greedy answer to each text (the adapter disabled, if there is one)."""
        device = next(model.parameters()).device
        answers = []
        disable = getattr(model, "disable_adapter", None)
        with disable() if disable is not None else nullcontext():
            for ids in tqdm(self.prompt_ids, desc="retain texts: the base model's answers"):
                out = model.generate(
                    torch.tensor([ids], device=device),
                    attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
                answers.append(out[0, len(ids) :].tolist())
        self.answers = answers

    def batch(self, step: int, size: int) -> dict[str, torch.Tensor]:
        """The ``step``-th batch of ``size`` texts (right-padded): ids, mask, trained positions.

        Trained: the last prompt position and every answer position but the last (each
        predicts the next answer token), so every answer token's distribution is kept."""
        if self.answers is None:
            raise RuntimeError("RetainSet.prepare(model) must run before batches are drawn")
        picks = [self.order[(step * size + i) % len(self.order)] for i in range(size)]
        rows = [self.prompt_ids[i] + self.answers[i] for i in picks]
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((size, width), pad, dtype=torch.long)
        mask = torch.zeros((size, width), dtype=torch.long)
        trained = torch.zeros((size, width), dtype=torch.bool)
        for r, (i, row) in enumerate(zip(picks, rows, strict=True)):
            ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
            start = len(self.prompt_ids[i]) - 1
            trained[r, start : len(row) - 1] = True
            if len(row) - 1 <= start:  # no answer at all: keep the first answer distribution anyway
                trained[r, start] = True
        return {"input_ids": ids, "attention_mask": mask, "trained": trained}
