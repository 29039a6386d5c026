"""NoveltyBench's full scorer's hub models: the DeBERTa generation-similarity classifier that
partitions a prompt's generations and the Skywork reward model that rates each class's first
member. The partition and the utility are ``calbench.metrics.noveltybench``'s (pure); these
only load the models and turn them into its ``Equivalence`` and ``Rater``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from calbench.metrics.noveltybench import Equivalence, Rater, rating, short_rule

CLASSIFIER = "yimingzhang/deberta-v3-large-generation-similarity"
CLASSIFIER_TOKENIZER = "microsoft/deberta-v3-large"
CLASSIFIER_THRESHOLD = 0.102
REWARD_MODEL = "Skywork/Skywork-Reward-Gemma-2-27B-v0.2"


def classifier_equivalence(device: str = "cpu") -> Equivalence:
    """NoveltyBench's DeBERTa similarity classifier (hub download): short rule, then P(same) > 0.102."""
    tok = AutoTokenizer.from_pretrained(CLASSIFIER_TOKENIZER)
    model = AutoModelForSequenceClassification.from_pretrained(CLASSIFIER).to(device).eval()

    @torch.no_grad()
    def equivalent(a: str, b: str) -> bool:
        rule = short_rule(a, b)
        if rule is not None:
            return rule
        first = [tok.cls_token_id, *tok.encode(a, add_special_tokens=False, truncation=True, max_length=128)]
        first.append(tok.sep_token_id)
        second = [*tok.encode(b, add_special_tokens=False, truncation=True, max_length=128), tok.sep_token_id]
        ids = torch.tensor([first + second], device=device)
        types = torch.tensor([[0] * len(first) + [1] * len(second)], device=device)
        p = model(input_ids=ids, token_type_ids=types).logits.softmax(-1)[0, 1]
        return float(p) > CLASSIFIER_THRESHOLD

    return equivalent


def reward_ratings(device: str = "cuda") -> Rater:
    """Ratings 1..10 of each generation for a prompt, from the Skywork reward model (hub, GPU)."""
    tok = AutoTokenizer.from_pretrained(REWARD_MODEL)
    model = AutoModelForSequenceClassification.from_pretrained(REWARD_MODEL, dtype=torch.bfloat16, num_labels=1)
    model = model.to(device).eval()

    @torch.no_grad()
    def rate(prompt: str, generations: Sequence[str]) -> list[int]:
        convs = [[{"role": "user", "content": prompt}, {"role": "assistant", "content": g}] for g in generations]
        batch: Any = tok.apply_chat_template(
            convs, tokenize=True, padding=True, truncation=True, return_tensors="pt", return_dict=True
        )
        rewards = model(**batch.to(device)).logits[:, 0].float().tolist()
        return [rating(r) for r in rewards]

    return rate
