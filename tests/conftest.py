"""Shared fixtures: tiny random models (built here, offline, in about a second each), the
reference systems' runs, the task set, SmolLM2's folder. How the suite runs (the bytecode it
compiles first, the order it sends modules in) is ``tests/suite.py``'s; its hooks are taken here.

``tiny_split`` splits digits into single tokens (like Qwen, SmolLM2, Gemma 3) and has a
ChatML template; ``tiny_merge`` merges digit runs (like GPT-2) and has no template, so
it stands for a base model. Both come from ``calbench.tiny.build_tiny_model``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.suite import (  # noqa: F401  (pytest takes a conftest's hooks by name)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_sessionfinish,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n 2`: one thread per worker (torch, BLAS, subprocesses)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")


# The reference systems' runs several modules read, each made once per test run: name -> (tasks,
# samples per prompt; None for the sample-free tasks). "quick": the quick selection plainly and under
# every prompting protocol (test_harness, test_protocols); "splits": the leaderboard's two splits
# (test_leaderboard_render's records); "exact": the sample-free tasks (test_enumeration); "train":
# the training probe (test_cli's `calbench eval` report).
REFERENCE_RUNS: dict[str, tuple[tuple[str, ...], int | None]] = {
    "quick": (
        ("calbench_numeric_quick", *(f"calbench_numeric_quick_{p}" for p in ("batch", "seeded", "ssot", "verbalized"))),
        200,
    ),
    "splits": (("calbench_numeric_unseen", "calbench_numeric_heldout"), 100),
    "exact": (("calbench_numeric_unseen_exact", "calbench_numeric_heldout_exact"), None),
    "train": (("calbench_numeric_train",), 60),
}


@dataclass(frozen=True)
class ReferenceRun:
    """A reference system's lm-eval run as written: its results file and samples logs."""

    folder: Path

    @property
    def files(self) -> list[Path]:
        return sorted(self.folder.rglob("results_*.json"))

    @property
    def results(self) -> dict:
        """Task -> its metrics (lm-eval's ``results["results"]``)."""
        from calbench.lm_eval_io import load_results

        (file,) = self.files
        return load_results(file)["results"]

    def samples(self, task: str) -> list[dict]:
        from calbench.lm_eval_io import read_samples, samples_log

        (file,) = self.files
        return list(read_samples(samples_log(file, task)))


@pytest.fixture(scope="session")
def references(tmp_path_factory):
    """``references(name, model)``: the ``REFERENCE_RUNS`` run ``name`` of a reference system
    (``calbench-oracle``, ``calbench-collapsed``), made by the first process of the test run that
    asks for it (the workers of ``-n 2`` share a folder and take turns through a file lock) and
    read from its files by every other; read-only."""
    import shutil

    from filelock import FileLock

    from calbench import evaluation

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    made: dict[tuple[str, str], ReferenceRun] = {}

    def get(name: str, model: str) -> ReferenceRun:
        if (name, model) not in made:
            folder = shared / "references" / name / model
            folder.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(f"{folder}.lock"):
                if not (folder / "done").is_file():
                    shutil.rmtree(folder, ignore_errors=True)
                    tasks, n = REFERENCE_RUNS[name]
                    evaluation.evaluate(model, list(tasks), num_samples=n, output_path=folder)
                    (folder / "done").touch()
            made[(name, model)] = ReferenceRun(folder)
        return made[(name, model)]

    return get


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


@pytest.fixture(scope="session", autouse=True)
def environment_report_once():
    """lm-eval puts torch's environment report in every evaluation's results (``add_env_info``:
    ``torch.utils.collect_env.get_pretty_env_info``, which runs ``pip list`` and a dozen other
    commands: 0.5-1 s). A test process's environment does not change while it runs, so the suite
    collects the report once per process and every evaluation in it gets that same text (a full
    run makes 104 evaluations; a ``calbench eval`` subprocess collects its own)."""
    from functools import cache

    from torch.utils import collect_env

    original = collect_env.get_pretty_env_info
    collect_env.get_pretty_env_info = cache(original)
    yield
    collect_env.get_pretty_env_info = original
