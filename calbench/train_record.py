"""What the core and the training add-on both read of a training run (pure): the names of
``calbench train``'s options, which of them do not change what is trained, and the losses a
run logged.

The add-on's ``TrainConfig`` has exactly the fields ``OPTIONS`` names
(``tests/test_training.py`` ties the two); recipes check their ``train:`` mappings against
``OPTIONS`` without importing the add-on (the core never imports it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# calbench train's options, as TrainConfig's fields (flags: "--" + name with "-" for "_").
OPTIONS = (
    "method",
    "model",
    "output",
    "soft_paths",
    "parameters",
    "widen",
    "extra_families",
    "trie_row_nodes",
    "decimals",
    "max_bins",
    "epochs",
    "samples_per_prompt",
    "max_steps",
    "prompts",
    "batch_size",
    "effective_batch",
    "lr",
    "weight_decay",
    "warmup_ratio",
    "max_grad_norm",
    "accumulation",
    "tau",
    "retain_weight",
    "retain_batch",
    "finetune",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "target_modules",
    "seed",
    "save_steps",
    "keep_checkpoints",
    "logging_steps",
    "resume",
    "overwrite",
    "use_cpu",
    "chat",
)
# What a record that lacks an option means: the run had the effect the option's default had when
# the record was written. An adapter's calbench_train.json, a run file and a leaderboard recipe's
# ``train:`` older than an option lack it; these are the options whose default has changed since,
# with the value they had before (the paper's grid, its ranges, and hard-target steps that summed
# their micro-batches). Today's defaults are never read into an older record: ``as_trained``
# fills these in, and recipes keep meaning what they meant when written (a recipe's ``train:``
# without ``parameters`` trains the grid, without ``accumulation`` the legacy sum).
BEFORE = {"parameters": "grid", "widen": 1.0, "accumulation": "legacy"}
# Options that do not change what is trained: they may differ between a run's segments, and a
# recipe leaves them to the run.
NOT_IDENTITY = ("output", "resume", "overwrite", "save_steps", "logging_steps", "keep_checkpoints")


def as_trained(options: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded or recipe's set of training options with ``BEFORE``'s values where it lacks them
    (for fresh parameters, ranges not widened: ``widen`` was 1 unless stated)."""
    return {**BEFORE, **options}


def logged_loss(history: Sequence[Mapping[str, Any]], step: int) -> float | None:
    """The training loss logged last at or before ``step`` (the trainer's mean over the
    ``logging_steps`` steps before it; for the soft loss a KL, 0 at a perfect fit), or None."""
    losses = [h for h in history if "loss" in h and int(h.get("step", 0)) <= step]
    return round(float(losses[-1]["loss"]), 4) if losses else None


def mean_logged_loss(history: Sequence[Mapping[str, Any]]) -> float:
    """The run's mean loss per optimizer step, from the logged losses (each the mean since the last log)."""
    total, last = 0.0, 0
    for entry in history:
        if "loss" in entry:
            total += entry["loss"] * (entry["step"] - last)
            last = entry["step"]
    return total / last if last else math.nan
