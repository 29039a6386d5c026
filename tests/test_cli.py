"""The command line, the lm-eval argument plumbing, the model catalogue and packaging."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import calbench
from calbench import model_catalogue, runner

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, check=False)


def test_tasks_path_commands():
    for cmd in (["calbench", "tasks-path"], [sys.executable, "-m", "calbench", "tasks-path"]):
        done = run(*cmd)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()) == calbench.tasks_path()


def test_lm_eval_argv_adds_calbench_defaults():
    argv = runner.lm_eval_argv(["--model", "hf", "--model_args", "pretrained=x", "--tasks", "t"], num_samples=7)
    assert argv[argv.index("--include_path") + 1] == str(calbench.tasks_path())
    assert argv[argv.index("--model_args") + 1] == "pretrained=x,enable_thinking=False"
    assert json.loads(argv[argv.index("--metadata") + 1]) == {"num_samples": 7}
    assert "--log_samples" in argv and "--output_path" in argv


def test_lm_eval_argv_respects_user_choices():
    argv = runner.lm_eval_argv(
        [
            "--model",
            "vllm",
            "--model_args",
            '{"pretrained": "x", "gpu_memory_utilization": 0.8}',
            "--include_path",
            "/mine",
            "--metadata",
            '{"seed": 3}',
            "--output_path",
            "out",
        ],
        num_samples=5,
    )
    assert argv[argv.index("--include_path") + 1] == "/mine"
    assert json.loads(argv[argv.index("--model_args") + 1]) == {
        "pretrained": "x",
        "gpu_memory_utilization": 0.8,
        "enable_thinking": False,
    }
    assert json.loads(argv[argv.index("--metadata") + 1]) == {"seed": 3, "num_samples": 5}
    assert argv.count("--output_path") == 1
    # Reference models take no thinking flag; a user's own flag is never overridden.
    oracle = runner.lm_eval_argv(["--model", "calbench-oracle", "--model_args", "seed=1"])
    assert oracle[oracle.index("--model_args") + 1] == "seed=1"
    own = runner.lm_eval_argv(["--model", "hf", "--model_args", "pretrained=x,enable_thinking=True"])
    assert own[own.index("--model_args") + 1] == "pretrained=x,enable_thinking=True"


def test_calbench_eval_end_to_end(tmp_path):
    done = run(
        "calbench",
        "eval",
        "--model",
        "calbench-oracle",
        "--tasks",
        "calbench_numeric_quick",
        "--num-samples",
        "4",
        "--output_path",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calbench_numeric_quick" in done.stdout  # lm-eval's own table
    assert "| OVERALL" in done.stdout and "truncnorm (II)" in done.stdout  # calbench's per-family table
    results = list(tmp_path.rglob("results_*.json"))
    assert len(results) == 1 and list(tmp_path.rglob("samples_calbench_numeric_quick_*.jsonl"))
    data = json.loads(results[0].read_text())
    assert data["configs"]["calbench_numeric_quick"]["repeats"] == 4


def test_models_catalogue_errors(capsys):
    from calbench.cli import main

    assert main(["models", "path", "no-such-model"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err
    assert main(["models", "list"]) == 0
    assert "smollm2-135m-instruct" in capsys.readouterr().out
    with pytest.raises(KeyError, match="catalogue has"):
        model_catalogue.folder("gpt-9")


def test_models_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    assert model_catalogue.folder("gemma-3-270m") == tmp_path / "models" / "gemma-3-270m"
    assert not model_catalogue.is_ready("gemma-3-270m")


def test_wheel_ships_the_tasks(tmp_path):
    # `calbench tasks-path` must work from an installed wheel, not only from a clone.
    # Build from a copy: setuptools writes build/ and *.egg-info into the source tree.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "calbench", src / "calbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tasks", src / "tasks")
    shutil.copytree(ROOT / "training", src / "training", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(src))
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next(tmp_path.glob("calbench-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if n.startswith("calbench/tasks/")}
    assert shipped == {p.name for p in calbench.tasks_path().glob("*.yaml")}
    site = tmp_path / "site"
    done = run(sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel))
    assert done.returncode == 0, done.stderr[-2000:]
    # -S: no site-packages, so the editable install of this clone cannot answer instead.
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import calbench; print(calbench.tasks_path())"
    done = run(sys.executable, "-S", "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == site / "calbench" / "tasks"
