"""Shared fixtures: tiny random models (built here, offline, in about a second each).

``tiny_split`` splits digits into single tokens (like Qwen, SmolLM2, Gemma 3) and has a
ChatML template; ``tiny_merge`` merges digit runs (like GPT-2) and has no template, so
it stands for a base model. Both come from ``calbench.tiny.build_tiny_model``.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n 2`: one thread per worker (torch, BLAS, subprocesses)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")

# The longest modules are collected first, longest first: on two workers (`-n 2 --dist loadfile`)
# each runs beside the others instead of alone after them (the enumeration test ran last, one worker
# idle), and the short modules fill in at the end. Their order: seconds per module on an idle
# machine, from a full run's --durations.
LONG_FIRST = (
    "test_smollm2_enumeration.py",
    "test_protocols.py",
    "test_param_ranges.py",
    "test_leaderboard_recipes.py",
    "test_leaderboard_render.py",
    "test_leaderboard_curves.py",
    "test_smollm2.py",
    "test_harness.py",
    "test_quality.py",
    "test_space.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def tiny_split(tmp_path_factory):
    from calbench.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_split"), digits="split", chat=True)


@pytest.fixture(scope="session")
def tiny_merge(tmp_path_factory):
    from calbench.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_merge"), digits="merge", chat=False)


@pytest.fixture(scope="session")
def calbench_tasks():
    """Every calbench task, loaded by lm-eval; NoveltyBench's prompts (the hub's in real use)
    come from the local fixture."""
    from pathlib import Path

    from calbench import evaluation

    prompts = Path(__file__).parent / "fixtures" / "noveltybench_prompts.jsonl"
    metadata = {"calbench_terminator": "<e>", "calbench_data_files": str(prompts)}
    names = [
        "calbench",
        "calbench_numeric_unseen_exact",
        "calbench_numeric_heldout_exact",
    ]  # the exact ones are untagged
    return evaluation.task_manager(metadata, include_defaults=False).load(names)["tasks"]


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct's converted folder (installed and converted on first use; the slow tests)."""
    from calbench import model_catalogue

    return model_catalogue.model_path("smollm2-135m-instruct")
