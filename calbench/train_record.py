"""The contract between the core and the training add-on: what both read of a training run.

The names of ``calbench train``'s options, which of them do not change what is trained, and what
a recorded set of them means (``as_trained``); the run folder's file names, the model card's
sections the leaderboard fills in, and the losses a run logged; and the entry point through
which the core turns a recipe's options into ``calbench train``'s command line
(``train_arguments``). ``calbench.training`` and ``calbench.leaderboard`` both import this
module; the add-on imports nothing of the leaderboard, and the core never imports the add-on.

The add-on's ``TrainConfig`` has exactly the fields ``OPTIONS`` names
(``tests/test_training.py`` ties the two); recipes check their ``train:`` mappings against
``OPTIONS`` without importing the add-on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
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

# The run folder (``calbench train --output``), as the add-on writes it and the leaderboard reads it.
RUN_FILE = "calbench_run.json"  # the run's identity and whether it finished (calbench.training.run_folder)
ADAPTER = "adapter"  # a finished run's adapter (a full fine-tune's model), beside its checkpoints
TRAIN_RECORD = "calbench_train.json"  # in the adapter: its resolved config, costs and loss history
CHECKPOINT = "checkpoint-"  # transformers' checkpoint-<step> folders
CHECKPOINT_FILE = "calbench_checkpoint.json"  # written into a checkpoint once transformers is done with it
TRAINER_STATE = "trainer_state.json"  # transformers' state in each checkpoint, its loss log included
INTERPOLATED = "calbench_interpolated.json"  # a WiSE-FT model folder's record (``calbench interpolate``)
WEIGHTS = ("adapter_model.safetensors", "model.safetensors")  # a LoRA checkpoint's weights, or a full fine-tune's

# The adapter's model card (``calbench.training.card``): the leaderboard writes its numbers between
# the evaluation heading and the paragraph after it (``calbench leaderboard card``).
CARD_EVALUATION = "## Evaluation"
CARD_AFTER_EVALUATION = "The resolved training configuration"

# The add-on's entry points (pyproject.toml) the core reaches it through, never importing it.
ENTRY_POINTS = "calbench.training"


def as_trained(options: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded or recipe's set of training options with ``BEFORE``'s values where it lacks them
    (for fresh parameters, ranges not widened: ``widen`` was 1 unless stated)."""
    return {**BEFORE, **options}


def trained_option(options: Mapping[str, Any], name: str) -> Any:
    """One option of a recorded or recipe's set of training options, as it was trained (``as_trained``)."""
    return as_trained(options).get(name)


def train_arguments(model: str, train: Mapping[str, Any]) -> list[str]:
    """``calbench train``'s command-line options for a recipe's training options, typed and validated
    by the add-on's own ``TrainConfig`` (its ``recipe_arguments``, reached through its entry point:
    the core never imports the add-on); a ``ValueError`` naming each bad option. A recipe means
    what it meant when written: the training prompts it does not state are the paper's grid, fresh
    parameters' ranges it does not state are not widened (``as_trained``), whatever calbench
    train's default is now."""
    found = [e for e in metadata.entry_points(group=ENTRY_POINTS) if e.name == "recipe_arguments"]
    if not found:
        raise ValueError(
            "the training add-on is not installed, so its options cannot be checked (reinstall calbench: pip install -e .)"
        )
    return list(found[0].load()(model, as_trained(train)))


def complete_checkpoints(run_folder: Path) -> list[tuple[int, Path]]:
    """A run folder's complete checkpoints (marked ``CHECKPOINT_FILE``, their weights there), by step."""
    found = []
    for p in Path(run_folder).glob(f"{CHECKPOINT}*"):
        if (p / CHECKPOINT_FILE).is_file() and any((p / w).is_file() for w in WEIGHTS):
            found.append((int(p.name.removeprefix(CHECKPOINT)), p))
    return sorted(found)


def trainer_log(checkpoint: Path | None) -> list[dict[str, Any]]:
    """A checkpoint's training log (transformers' ``trainer_state.json``), or nothing."""
    state = None if checkpoint is None else checkpoint / TRAINER_STATE
    if state is None or not state.is_file():
        return []
    return list(json.loads(state.read_text()).get("log_history", []))


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
