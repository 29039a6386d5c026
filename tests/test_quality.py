"""Lint, format and type checks run with the tests, so CI keeps them clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = {
    "ruff-lint": ["ruff", "check", "calbench", "training", "tests", "benchmarks"],
    "ruff-format": ["ruff", "format", "--check", "calbench", "training", "tests", "benchmarks"],
    "mypy": ["mypy"],
}


@pytest.mark.parametrize("name", CHECKS)
def test_clean(name):
    cmd = CHECKS[name]
    if shutil.which(cmd[0]) is None:
        pytest.skip(f"{cmd[0]} is not installed (pip install -e '.[dev]')")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_ci_runs_the_readme_test_command():
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command in (ROOT / "README.md").read_text()
