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
from calbench.protocols import PROTOCOLS
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
    # A diagnostic: one training prompt per training family.
    "calbench_numeric_train.yaml": (
        "train",
        "selected",
        1,
        "0be8bb342c91534d9429ea3d42a256c41e0fd495974266ca229fd6f7a6660b7b",
    ),
    # Diagnostics: prompts inside the training ranges off the grid, and in the ranges widened 2x.
    "calbench_numeric_interp.yaml": (
        "interp",
        "selected",
        1,
        "917f060639711c5b1542ae5ba1869161b422757919f22b357baedac2b64ea595",
    ),
    "calbench_numeric_wide.yaml": (
        "wide",
        "selected",
        1,
        "fb4d5c55795e77dadef58b8d73ca7702addb6692bd8ae84dea40858dc785c965",
    ),
    # Diagnostics of transfer: the held-back validation families, and one law under two names.
    "calbench_numeric_validation.yaml": (
        "validation",
        "selected",
        1,
        "26cdfeb2e2044dabaa7f81e2faf55ea4702d713a8274d31b8aaa5c5286d0c2e9",
    ),
    "calbench_numeric_names.yaml": (
        "names",
        "selected",
        1,
        "6b98cac3cc3b9fbba488806cfaa8a555b239c6a1a8def617c3a9a2d151a84774",
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
    # The sample-free tasks enumerate the answers to the sampling tasks' prompts.
    "calbench_numeric_unseen_exact.yaml": (
        "unseen",
        "selected",
        1,
        "9d5aed020ae5dce99102e0489de836122c3e303e1ea2189303c1d502209f2ac0",
    ),
    "calbench_numeric_heldout_exact.yaml": (
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
    # The sampling protocols (calbench.protocols): the same laws in each protocol's words.
    "calbench_numeric_unseen_batch.yaml": (
        "unseen",
        "selected",
        1,
        "cbe4272a08cee6311ac14d05f0f8140cba9cd926ab191a8763c2f95539478f1b",
    ),
    "calbench_numeric_heldout_batch.yaml": (
        "heldout",
        "selected",
        1,
        "7f59749c62bcec0490525b1d2cfc9a6d49829bb102f3db80f23be2502d4bdd77",
    ),
    "calbench_numeric_quick_batch.yaml": (
        "all",
        "selected",
        1,
        "93a20d8284c698e2dbf1edc99a43d0d2a76cfef7c56b1da5f8e5679634cba50c",
    ),
    "calbench_numeric_unseen_seeded.yaml": (
        "unseen",
        "selected",
        1,
        "6c72fdfddbe4071bd8b165ac9ae1ee511b062c570c24ca979e9b7640c76a1bd6",
    ),
    "calbench_numeric_heldout_seeded.yaml": (
        "heldout",
        "selected",
        1,
        "95ded8011cb55d08008c670be7c76fcb6c57fe0b8ef88ca38cc4d8797ff95690",
    ),
    "calbench_numeric_quick_seeded.yaml": (
        "all",
        "selected",
        1,
        "873cf5f72c2b6365e6271c209f2db0a2dd84a6e459ef4567a2853af48f8e4a04",
    ),
    "calbench_numeric_unseen_ssot.yaml": (
        "unseen",
        "selected",
        1,
        "8eaf8678b500c9a212900491e941acfc9f0b5c3616de25fef18c3166305befb7",
    ),
    "calbench_numeric_heldout_ssot.yaml": (
        "heldout",
        "selected",
        1,
        "d801f507ad6ec13706c1e8922a06371178d6e40d700e618c20b022cf383cdc1d",
    ),
    "calbench_numeric_quick_ssot.yaml": (
        "all",
        "selected",
        1,
        "1587516e03ba157b0c7259bacf837b188815d1053c0d123f9f0d976c858fbbe4",
    ),
    "calbench_numeric_unseen_verbalized.yaml": (
        "unseen",
        "selected",
        1,
        "96545e2fcba37b26dda6b1a70c2e24637b0c955be222df9f514e2b5c132ea72d",
    ),
    "calbench_numeric_heldout_verbalized.yaml": (
        "heldout",
        "selected",
        1,
        "f34513d1a65fad6da67a58319ecbfb5adbf846fa82b8cd77453ca0800bc3f1fe",
    ),
    "calbench_numeric_quick_verbalized.yaml": (
        "all",
        "selected",
        1,
        "e4e15a90f5bbfe342e5ec6cdb020ac431ff1cb1a378843f885e0f89431a90e0e",
    ),
}


def load_task(name: str) -> dict[str, Any]:
    return load_task_yaml(TASKS / name)


def protocol_of_task(task: str) -> str:
    """The protocol a task file's name ends with ("independent" for the others)."""
    return next((p for p in PROTOCOLS if task.endswith(f"_{p}.yaml")), "independent")


def prompts_sha256(split: str, points: str, protocol: str = "independent") -> str:
    docs = numeric_docs(calbench_split=split, calbench_points=points, calbench_protocol=protocol)["test"]
    return hashlib.sha256("\n".join(docs["prompt"]).encode()).hexdigest()


def test_every_numeric_task_has_a_golden() -> None:
    # A new task without a golden would drift unnoticed.
    numeric = {p.name for p in TASKS.glob("calbench_numeric*.yaml")}
    assert numeric == set(GOLDEN)


@pytest.mark.parametrize("task", GOLDEN)
def test_prompts_golden(task: str) -> None:
    split, points, version, expected = GOLDEN[task]
    config = load_task(task)
    protocol = protocol_of_task(task)
    expected_kwargs = {"calbench_split": split, "calbench_points": points, **SPACES.get(task, {})}
    if protocol != "independent":
        expected_kwargs["calbench_protocol"] = protocol
    assert config["dataset_kwargs"] == expected_kwargs, f"{task}: its dataset changed; update GOLDEN[{task!r}]"
    current = config["metadata"]["version"]
    actual = prompts_sha256(split, points, protocol)
    assert current == version and actual == expected, (
        f"{task}: prompts changed — bump the task's metadata.version and update the golden "
        f"(golden: version {version}, {expected}; now: version {current}, {actual})"
    )
