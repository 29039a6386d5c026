"""Every script in benchmarks/ still imports against today's calbench (a renamed or moved name
breaks a benchmark silently otherwise: nothing else runs them), and each has a ``main``."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def test_the_benchmarks_are_found():
    assert {"sampling", "vllm_backends", "gpu_check"} <= {p.stem for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_a_benchmark_script_imports(script, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as when run: its folder is on sys.path
    spec = importlib.util.spec_from_file_location(f"calbench_benchmark_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)  # an ImportError here is a stale benchmark
    assert callable(module.main)
