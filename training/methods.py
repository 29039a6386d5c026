"""The training methods, one row each: what a method trains on (its collator), its loss, and how
an adapter's card names it. ``calbench train --method`` picks a row; its defaults (epochs,
examples per prompt, canonical-space size) are ``config.METHOD_DEFAULTS``'s row of the same name.

* ``soft``: the KL from the trie's next-token targets to the model, along one sampled answer per
  example (``SoftPathCollator``) or over every trie node (``--soft-paths all``:
  ``FullTrieCollator``), ``losses.soft_kl``.
* ``hard``: cross-entropy on a sampled answer and its terminator (``HardCollator``,
  ``losses.hard_ce``).

A new target is a row here (a collator in ``data.py`` and a loss in ``losses.py``) and its
defaults in ``config.METHOD_DEFAULTS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from calbench.training.config import ResolvedTrainConfig
from calbench.training.data import FullTrieCollator, HardCollator, SoftPathCollator, TrainingSet
from calbench.training.losses import hard_ce, soft_kl


@dataclass(frozen=True)
class Method:
    """A training method: its collator, its loss and its card's description."""

    name: str

    def collator(self, config: ResolvedTrainConfig, data: TrainingSet, max_bins: int) -> Any:
        raise NotImplementedError

    def loss(self, heads: list[torch.Tensor], logits: torch.Tensor, inputs: dict[str, Any], tau: float) -> torch.Tensor:
        """The batch's loss from the model's ``logits`` (and ``heads``: logits computed before the
        rows' own, the full trie's roots)."""
        raise NotImplementedError

    def card(self, config: ResolvedTrainConfig) -> str:
        """The adapter card's **Method** line."""
        raise NotImplementedError


class Soft(Method):
    def collator(self, config: ResolvedTrainConfig, data: TrainingSet, max_bins: int) -> Any:
        if config.soft_paths == "all":
            return FullTrieCollator(data, config.decimals, max_bins, config.trie_row_nodes)
        return SoftPathCollator(data, config.decimals, max_bins)

    def loss(self, heads: list[torch.Tensor], logits: torch.Tensor, inputs: dict[str, Any], tau: float) -> torch.Tensor:
        """``soft_kl`` on the rows ``row_index`` picks from the heads' logits, then ``logits``
        (as if concatenated; they are not: each part is read in place)."""
        index, loss = inputs["row_index"], None
        offset = 0
        for part in [*heads, logits.reshape(-1, logits.shape[-1])]:
            mine = (index >= offset) & (index < offset + part.shape[0])
            if bool(mine.any()):
                term = soft_kl(
                    part,
                    inputs["child_ids"][mine],
                    inputs["child_q"][mine],
                    inputs["row_weights"][mine],
                    tau=tau,
                    rows=index[mine] - offset,
                )
                loss = term if loss is None else loss + term
            offset += part.shape[0]
        assert loss is not None, "a soft batch trains at least one row"
        return loss

    def card(self, config: ResolvedTrainConfig) -> str:
        return "soft targets: KL from the trie's next-token targets q(·|prefix) to the model, " + (
            "along one sampled answer per example" if config.soft_paths == "sample" else "over every trie node (exact)"
        )


class Hard(Method):
    def collator(self, config: ResolvedTrainConfig, data: TrainingSet, max_bins: int) -> Any:
        return HardCollator(data, config.decimals, max_bins)

    def loss(self, heads: list[torch.Tensor], logits: torch.Tensor, inputs: dict[str, Any], tau: float) -> torch.Tensor:
        return hard_ce(logits, inputs["labels"])

    def card(self, config: ResolvedTrainConfig) -> str:
        return "hard targets: cross-entropy on sampled answers and their terminator"


METHODS: dict[str, Method] = {m.name: m for m in (Soft("soft"), Hard("hard"))}
