"""Lint, format and type checks run with the integration tests, so CI keeps them clean.

They run the tools of the Python running the tests (``python -m ruff``, ``python -m mypy``).
Under CI (``CI`` set, as CI services do) a missing tool fails the check: CI must never pass
because nothing was checked. Elsewhere it is skipped, with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = {
    "ruff-lint": ["ruff", "check", "calbench", "training", "tests", "benchmarks"],
    "ruff-format": ["ruff", "format", "--check", "calbench", "training", "tests", "benchmarks"],
    "mypy": ["mypy"],  # what it checks, and how: pyproject.toml [tool.mypy]
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(tool: str, check: str) -> None:
    """Fail (under CI) or skip (elsewhere) when ``tool`` is not installed."""
    if importlib.util.find_spec(tool) is not None:
        return
    message = f"{tool} is not installed in {sys.executable}: pip install -e '.[dev]'"
    if in_ci():
        pytest.fail(f"CI={os.environ['CI']}: the {check} check must run, not skip; {message}")
    pytest.skip(message)


@pytest.mark.integration
@pytest.mark.parametrize("name", CHECKS)
def test_clean(name: str) -> None:
    tool, *args = CHECKS[name]
    require(tool, name)
    done = subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_missing_tool_fails_under_ci_and_is_skipped_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    for value in ("true", "1"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.fail.Exception, match=r"mypy check must run, not skip; .*pip install -e '\.\[dev\]'"):
            require("mypy", "mypy")
    for value in ("", "false"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.skip.Exception, match=r"mypy is not installed .*pip install -e '\.\[dev\]'"):
            require("mypy", "mypy")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        require("mypy", "mypy")


def test_ci_runs_the_readme_test_command() -> None:
    # The same whole line (a substring would let "... && pytest" pass against "... && pytest -m ''"),
    # and it runs every tier: plain `pytest` is only the fast one (pyproject.toml addopts).
    # Then the tests marked vllm, in vLLM's own environment (.ci/vllm-cpu-env), with vLLM required.
    lines = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    (command,) = [line for line in lines if line.startswith("python3 -m venv .venv ")]
    assert command in (ROOT / "README.md").read_text().splitlines()
    assert command.endswith('pytest -m "" -n 2 --dist loadfile')  # every tier, on two workers
    assert lines[-1].startswith("bash .ci/vllm-cpu-env .venv-vllm && ")
    assert lines[-1].endswith("CALBENCH_REQUIRE_VLLM=1 pytest -m vllm -p no:cacheprovider -s")


@pytest.mark.parametrize("failing", ["pip", "pytest"])
def test_ci_stops_when_any_step_of_the_readme_command_fails(tmp_path, failing):
    """bash's set -e ignores a failure before the last command of an && list: a failed install
    must still fail CI, and never reach the vLLM step."""
    import shutil

    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    (tmp_path / ".ci" / "vllm-cpu-env").write_text("touch reached-vllm\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {  # a venv whose activate script defines deactivate; each tool succeeds unless it is the failing one
        "python3": 'mkdir -p .venv/bin && echo "deactivate() { :; }" > .venv/bin/activate',
        "pip": "exit 0",
        "pytest": "exit 0",
    }
    fakes[failing] = "exit 7"
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env)
    assert done.returncode == 7, done.stderr[-2000:]
    assert not (tmp_path / "reached-vllm").exists()


@pytest.mark.parametrize("modules", [3, 300])  # alone, and in a pool
def test_the_suite_compiles_what_the_install_left_uncompiled(tmp_path, monkeypatch, modules):
    """The README's install skips pip's byte-compilation (``--no-compile``); the suite's first step
    (``tests.suite.compile_stale``) compiles the modules that lack bytecode, and leaves alone those
    that do not compile."""
    import importlib.util

    from tests.suite import compile_stale

    sources = [tmp_path / "pkg" / f"m{i}.py" for i in range(modules)]
    sources[0].parent.mkdir()
    for source in sources:
        source.write_text("X = 1\n")
    broken = tmp_path / "pkg" / "newer_syntax.py"
    broken.write_text("def f[T](a) -> :\n")  # as torch's few modules in newer syntax: not Python here
    compile_stale([tmp_path])
    assert all(Path(importlib.util.cache_from_source(str(s))).is_file() for s in sources)
    assert not Path(importlib.util.cache_from_source(str(broken))).exists()
    stamp = Path(importlib.util.cache_from_source(str(sources[0]))).stat().st_mtime_ns
    compile_stale([tmp_path])  # nothing stale now: nothing is written again
    assert Path(importlib.util.cache_from_source(str(sources[0]))).stat().st_mtime_ns == stamp
