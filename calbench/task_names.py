"""The prompt sets and the names of the lm-eval tasks that ask them (pure): the one place they are spelled.

A prompt set is a split of the families' parameters (``calbench.families``), a set drawn around
the training ranges (``calbench.param_ranges``), the held-back validation families
(``calbench.extra_families``) or the name-versus-law pairs (``calbench.name_pairs``). Its
numeric sampling task is ``calbench_numeric_<set>``; a sampling protocol adds its suffix
(``calbench.protocols``), the likelihood and sample-free variants of the two scored splits
theirs.
"""

from __future__ import annotations

PREFIX = "calbench_numeric_"


def task_of(prompt_set: str, suffix: str = "") -> str:
    """The numeric task that asks a prompt set (``calbench_numeric_<set><suffix>``)."""
    return f"{PREFIX}{prompt_set}{suffix}"


# The two scored splits: every family is scored on one of them (``laws.Family.eval_split``).
NUMERIC_SPLITS = ("unseen", "heldout")
SAMPLING_TASKS = {s: task_of(s) for s in NUMERIC_SPLITS}
LIKELIHOOD_TASKS = {s: task_of(s, "_likelihood") for s in NUMERIC_SPLITS}
EXACT_TASKS = {s: task_of(s, "_exact") for s in NUMERIC_SPLITS}  # sample-free (enumerated)
QUICK = task_of("quick")  # the quick selection: every family's selected points (42 prompts)
NAMES = task_of("names")  # the name-versus-law pairs (calbench.name_pairs)
VALIDATION = task_of("validation")  # the held-back validation families (calbench.extra_families)

# Where an adapter stands (calbench.param_ranges): its training prompts, between them, beyond
# them (the unseen split), on families it never saw, and in the ranges widened 2x.
SPLIT_TASKS = {s: task_of(s) for s in ("train", "interp", "unseen", "heldout", "wide")}
SPLIT_LABELS = {
    "train": "training prompts",
    "interp": "interpolation",
    "unseen": "unseen",
    "heldout": "held-out",
    "wide": "widened 2x",
}
# Diagnostics of transfer (shown where a record has them): the held-back validation families, and
# the name-versus-law pairs' two halves, the held-out-named prompts and the training-named ones,
# each scored on its own families.
DIAGNOSTIC_TASKS = {"validation": VALIDATION, "names_heldout": NAMES, "names_train": NAMES}
DIAGNOSTIC_LABELS = {
    "validation": "validation families",
    "names_heldout": "held-out names",
    "names_train": "training names",
}
NAME_HALVES = {"names_heldout": True, "names_train": False}  # the half: held-out families, or not

# The numeric sampling tasks' prompt sets: each split, the quick selection, the diagnostics of the
# training ranges (training prompts, interpolation, the widened ranges), the held-back validation
# families and the name-versus-law pairs.
SAMPLING_SETS = ("unseen", "heldout", "quick", "train", "interp", "wide", "validation", "names")
# What a numeric task's ``calbench_split`` may name: a prompt set, or both scored splits ("all").
SPLIT_CHOICES = (*NUMERIC_SPLITS, "all", "train", "interp", "wide", "validation", "names")
# The prompt sets a curve's checkpoint can be chosen on (``calbench leaderboard choose --split``).
CHOICE_SETS = ("validation", "train", "interp", "unseen", "wide")
ENUMERATION_TASKS = (*EXACT_TASKS.values(), "calbench_exact")  # the sample-free tasks
