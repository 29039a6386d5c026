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

# The longest modules are collected and sent first, longest first: on two workers (`-n 2 --dist loadfile`)
# each runs beside the others instead of alone after them (the enumeration test ran last, one worker
# idle), and the short modules fill in at the end. Their order: seconds per module (the numbers beside
# them), one worker beside a one-thread training run on this 2-core machine.
LONG_FIRST = (  # at 875b205: pytest -m "" -n 1 --dist loadfile --durations=0, summed per module
    "test_smollm2_enumeration.py",  # 339
    "test_harness.py",  # 160
    "test_leaderboard_recipes.py",  # 132
    "test_protocols.py",  # 118
    "test_param_ranges.py",  # 109
    "test_leaderboard_render.py",  # 73
    "test_smollm2.py",  # 65
    "test_leaderboard_curves.py",  # 63
    "test_space.py",  # 56
    "test_training.py",  # 32
    "test_training_runs.py",  # 30
    "test_cli.py",  # 28
)


def pytest_configure(config):
    # Compiled once here, by the controller, before any worker starts (compile_stale): calbench's own
    # source tree (each `calbench` subprocess of the suite compiled it again, 0.2-0.3 s of its start)
    # and the environment's packages (compileall writes bytecode whatever PYTHONDONTWRITEBYTECODE says).
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        import sys
        import sysconfig
        from pathlib import Path

        root = Path(__file__).resolve().parents[1]
        folders = [root / "calbench", root / "training"]
        if sys.prefix != sys.base_prefix:  # a virtual environment's packages (the system's are not ours to write)
            folders.append(Path(sysconfig.get_paths()["purelib"]))
        compile_stale(folders)
    # xdist reorders --dist loadfile's modules by their number of tests (most first) unless told not to:
    # the two-test enumeration module, the longest, then ran last, one worker idle beside it.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def compile_stale(folders: list) -> None:
    """Compiles the modules under ``folders`` that have no up-to-date bytecode, on every core.

    The README's test command installs with ``pip install --no-compile``: pip compiles one file at
    a time (the install fell by 40-45 s without it), and without compiled modules every process of
    the suite would compile what it imports, again and again under PYTHONDONTWRITEBYTECODE (set on
    CI machines; calbench's own editable source tree is never compiled by pip at all). After a plain
    ``pip install`` nothing is stale and the scan costs about a second. Files that do not compile
    (torch ships a few in Python 3.12 syntax) are left as pip leaves them."""
    import compileall
    import importlib.util
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial
    from pathlib import Path

    stale = []
    for folder in folders:
        for source in Path(folder).rglob("*.py"):
            compiled = Path(importlib.util.cache_from_source(str(source)))
            if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
                stale.append(str(source))
    if len(stale) < 200:  # a few (an edited module, the ones that never compile): not worth a pool
        for name in stale:
            compileall.compile_file(name, quiet=2)
        return
    with ProcessPoolExecutor() as pool:
        list(pool.map(partial(compileall.compile_file, quiet=2), stale, chunksize=64))


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
