"""Golden hashes of the rendered prompts, one per numeric task and task version.

Results are only comparable between runs that asked the same questions. Any change to the
prompt text, the grids, the rounding or the point order changes a hash below; the fix is to
bump the task's ``metadata.version`` in its YAML (so published numbers stay attributable)
and then record the new hash here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from calbench.harness import numeric_docs
from tests.helpers import load_task_yaml

TASKS = Path(__file__).resolve().parents[1] / "tasks"

# task YAML -> (calbench_split, calbench_points, metadata.version, SHA-256 of the prompts joined by "\n")
# The likelihood tasks also pin their canonical space (dataset_kwargs beyond split and points).
SPACES = {
    "calbench_numeric_unseen_likelihood.yaml": {"calbench_decimals": 5, "calbench_max_bins": 1001},
    "calbench_numeric_heldout_likelihood.yaml": {"calbench_decimals": 5, "calbench_max_bins": 1001},
}
GOLDEN = {
    "calbench_numeric_unseen.yaml": (
        "unseen",
        "selected",
        1,
        "9d5aed020ae5dce99102e0489de836122c3e303e1ea2189303c1d502209f2ac0",
    ),
    "calbench_numeric_heldout.yaml": (
        "heldout",
        "selected",
        1,
        "db98543a33bd00a2d8aae28753fa4beef1c0c9ee7e7914854bfe8e5d4a46306d",
    ),
    "calbench_numeric_unseen_full.yaml": (
        "unseen",
        "full",
        1,
        "2ed379b32a3b96ec99e90bcb274d8da998438dc35993d18e180d14a932fe4ad6",
    ),
    "calbench_numeric_heldout_full.yaml": (
        "heldout",
        "full",
        1,
        "951ecbf4f2719cb8657bcbc58a893166e3043e6d4886eeb0c7fe227ca782cc6e",
    ),
    # The likelihood tasks ask the same questions as their sampling counterparts.
    "calbench_numeric_unseen_likelihood.yaml": (
        "unseen",
        "selected",
        1,
        "9d5aed020ae5dce99102e0489de836122c3e303e1ea2189303c1d502209f2ac0",
    ),
    "calbench_numeric_heldout_likelihood.yaml": (
        "heldout",
        "selected",
        1,
        "db98543a33bd00a2d8aae28753fa4beef1c0c9ee7e7914854bfe8e5d4a46306d",
    ),
    "calbench_numeric_quick.yaml": (
        "all",
        "selected",
        1,
        "01ea40f245321fa22567f9af395146f6699ea9d0eb967075b41791887b775fb1",
    ),
}


def load_task(name: str) -> dict[str, Any]:
    return load_task_yaml(TASKS / name)


def prompts_sha256(split: str, points: str) -> str:
    docs = numeric_docs(calbench_split=split, calbench_points=points)["test"]
    return hashlib.sha256("\n".join(docs["prompt"]).encode()).hexdigest()


def test_every_numeric_task_has_a_golden() -> None:
    # A new task without a golden would drift unnoticed.
    numeric = {p.name for p in TASKS.glob("calbench_numeric*.yaml")}
    assert numeric == set(GOLDEN)


@pytest.mark.parametrize("task", GOLDEN)
def test_prompts_golden(task: str) -> None:
    split, points, version, expected = GOLDEN[task]
    config = load_task(task)
    expected_kwargs = {"calbench_split": split, "calbench_points": points, **SPACES.get(task, {})}
    assert config["dataset_kwargs"] == expected_kwargs, f"{task}: its dataset changed; update GOLDEN[{task!r}]"
    current = config["metadata"]["version"]
    actual = prompts_sha256(split, points)
    assert current == version and actual == expected, (
        f"{task}: prompts changed — bump the task's metadata.version and update the golden "
        f"(golden: version {version}, {expected}; now: version {current}, {actual})"
    )
