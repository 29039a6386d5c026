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
from calbench import evaluation, model_catalogue, param_ranges, vllm_support

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, check=False)


@pytest.mark.integration
def test_tasks_path_commands():
    for cmd in (["calbench", "tasks-path"], [sys.executable, "-m", "calbench", "tasks-path"]):
        done = run(*cmd)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()) == calbench.tasks_path()


def test_lm_eval_args_adds_calbench_defaults():
    ns = evaluation.lm_eval_args(["--model", "hf", "--model_args", "pretrained=x", "--tasks", "t"], num_samples=7)
    assert ns.include_path == str(calbench.tasks_path())
    assert ns.model_args == {"pretrained": "x", "enable_thinking": False}
    assert ns.metadata == {"num_samples": 7}
    assert ns.log_samples is True and ns.output_path == str(evaluation.DEFAULT_OUTPUT)


@pytest.mark.parametrize(
    ("tasks", "own_only"),
    [("calbench_numeric_quick", True), ("calbench_numeric_quick,calbench_diagnostics", True),
     ("calbench_numeric_quick,arithmetic", False), ("tasks/calbench_numeric_quick.yaml", False),
     ("calbench_retention", False), ("calbench_retention_offline", True)],
)  # fmt: skip
def test_lm_evals_own_task_index_is_skipped_only_when_every_task_is_calbenchs(tasks, own_only):
    import lm_eval.tasks

    stock = lm_eval.tasks.TaskManager
    ns = evaluation.lm_eval_args(["--model", "calbench-oracle", "--tasks", tasks])
    with evaluation._own_tasks_only(ns):
        assert (lm_eval.tasks.TaskManager is stock) is not own_only  # stock: lm-eval's own index too
        if own_only:
            built = lm_eval.tasks.TaskManager(include_path=ns.include_path)
            assert "arithmetic" not in built.all_tasks  # lm-eval's own task, not indexed
            assert "calbench_numeric_quick" in built.all_tasks
    assert lm_eval.tasks.TaskManager is stock


def test_lm_eval_args_respects_user_choices():
    ns = evaluation.lm_eval_args(
        [
            "--model",
            "vllm",
            "--model_args",
            '{"pretrained": "x", "gpu_memory_utilization": 0.8}',
            "--include_path",
            "/mine",
            "--metadata",
            '{"seed": 3, "num_samples": 9}',
            "--output_path",
            "out",
            "--tasks",
            "t",
        ],
        num_samples=5,
    )
    assert ns.include_path == "/mine" and ns.output_path == "out"
    assert ns.model_args == {"pretrained": "x", "gpu_memory_utilization": 0.8, "enable_thinking": False}
    assert ns.metadata == {"seed": 3, "num_samples": 9}  # the user's own metadata wins


def test_lm_eval_args_batches_vllm_requests_unless_told():
    ns = evaluation.lm_eval_args(["--model", "vllm", "--model_args", "pretrained=x", "--tasks", "t"])
    assert ns.batch_size == "auto"
    ns = evaluation.lm_eval_args(["--model", "vllm", "--model_args", "pretrained=x", "--tasks", "t", "-b", "4"])
    assert ns.batch_size == "4"
    assert getattr(evaluation.lm_eval_args(["--model", "hf", "--tasks", "t"]), "batch_size", None) is None


def test_lm_eval_args_keeps_one_request_at_a_time_for_a_lora_on_vllms_cpu_build(monkeypatch):
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    args = ["--model", "vllm", "--model_args", "pretrained=x,lora_local_path=a", "--tasks", "t"]
    assert getattr(evaluation.lm_eval_args(args), "batch_size", None) is None
    monkeypatch.delenv("VLLM_TARGET_DEVICE")
    if not vllm_support.is_cpu_build():  # a GPU build: batched
        assert evaluation.lm_eval_args(args).batch_size == "auto"
    # Reference models take no thinking flag; a user's own flag is never overridden.
    oracle = evaluation.lm_eval_args(["--model", "calbench-oracle", "--model_args", "seed=1", "--tasks", "t"])
    assert oracle.model_args == {"seed": 1} and oracle.metadata == {"calbench_terminator": ""}
    own = evaluation.lm_eval_args(
        ["--model", "hf", "--model_args", "pretrained=x,enable_thinking=True", "--tasks", "t"]
    )
    assert own.model_args == {"pretrained": "x", "enable_thinking": True}


@pytest.mark.parametrize(
    "argv",
    [
        ["-M", "hf", "-a", "pretrained=x", "-t", "t", "-o", "mine"],
        ["--model", "hf", "--model_args", "pretrained=x", "--tasks", "t", "--output_path", "mine"],
        ["--model=hf", "--model_args=pretrained=x", "--tasks=t", "--output_path=mine"],
        ["--model", "hf", "--model_args", '{"pretrained": "x"}', "--tasks", "t", "-o", "mine"],
        ["run", "--model", "hf", "--model_args", "pretrained=x", "--tasks", "t", "-o", "mine"],
    ],
)
def test_every_lm_eval_form_means_the_same(argv):
    ns = evaluation.lm_eval_args(argv)
    assert ns.output_path == "mine" and ns.tasks == ["t"]
    assert ns.model == "hf" and ns.model_args == {"pretrained": "x", "enable_thinking": False}


def test_a_config_file_counts_as_given(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "model: calbench-oracle\ntasks: calbench_numeric_quick,calbench_numeric_heldout\noutput_path: mine\n"
    )
    ns = evaluation.lm_eval_args(["--config", str(config)])
    assert ns.model == "calbench-oracle" and ns.tasks == ["calbench_numeric_quick", "calbench_numeric_heldout"]
    assert ns.output_path == "mine" and ns.metadata == {"calbench_terminator": ""}  # the YAML's model's defaults
    evaluation.check_eval_args(ns)  # its tasks count: no "name the tasks"
    overridden = evaluation.lm_eval_args(["--config", str(config), "-o", "cli"])
    assert overridden.output_path == "cli"  # the command line wins, as in lm-eval
    with pytest.raises(evaluation.EvalArgumentError, match=r"--config .*missing\.yaml"):
        evaluation.lm_eval_args(["--config", str(tmp_path / "missing.yaml")])


def test_short_forms_get_calbench_defaults():
    oracle = evaluation.lm_eval_args(["-M", "calbench-oracle", "-t", "t"])
    assert oracle.metadata == {"calbench_terminator": ""}  # the likelihood tasks need it
    several = evaluation.lm_eval_args(["-M", "calbench-hf", "-a", "pretrained=x", "dtype=float32", "-t", "t"])
    assert several.model_args == {"pretrained": "x", "dtype": "float32", "enable_thinking": False}
    assert several.metadata == {"calbench_first_token_support": True}
    kv = evaluation.lm_eval_args(["-M", "hf", "-t", "t", "--metadata", "calbench_data_files=p.jsonl", "seed=2"])
    assert kv.metadata == {"calbench_data_files": "p.jsonl", "seed": 2}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "hf", "--tasks", "calbench_numeric_quik"], "unknown task 'calbench_numeric_quik'; did you mean"),
        pytest.param(  # lm-eval indexes all of its own tasks to say so: seconds
            ["--model", "hf", "--tasks", "no_such_task"], "Tasks not found: no_such_task", marks=pytest.mark.integration
        ),
        (["--model", "hf", "--model_args", "pretrained=/no/such/model", "--tasks", "calbench_numeric_quick"],
         "pretrained=/no/such/model: no such file or folder"),
        (["--model", "hf", "--model_args", "pretrained=./gone,peft=x", "--tasks", "calbench_numeric_quick"],
         "pretrained=./gone: no such file or folder"),
        (["--model", "hf", "--metadata", "{bad", "--tasks", "calbench_numeric_quick"], "Invalid JSON: {bad"),
        (["--model", "hf", "--num-samples", "0", "--tasks", "calbench_numeric_quick"], "--num-samples must be a whole number from 1 to 100000, got 0"),
        (["--model", "hf"], "name the tasks to run with --tasks"),
    ],
)  # fmt: skip
def test_ordinary_mistakes_get_one_line_before_any_model_loads(argv, message, capsys):
    from calbench.cli import main

    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calbench eval: ") and message in err and "Traceback" not in err, err
    assert err.strip().count("\n") == 0  # one line


@pytest.mark.integration
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


@pytest.mark.integration
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
    data = {n.removeprefix("calbench/data/") for n in names if n.startswith("calbench/data/")}
    assert (
        data == {p.name for p in (ROOT / "calbench" / "data").glob("*.json")} >= {"prompt_sets.json", "q95_table.json"}
    )
    site = tmp_path / "site"
    done = run(sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel))
    assert done.returncode == 0, done.stderr[-2000:]
    # -S: no site-packages, so the editable install of this clone cannot answer instead.
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import calbench; print(calbench.tasks_path())"
    done = run(sys.executable, "-S", "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == site / "calbench" / "tasks"
    from calbench.metrics import q95_table  # the installed copy's generated data is the clone's

    assert q95_table.read(site / "calbench" / "data" / "q95_table.json") == q95_table.read()
    assert (site / "calbench" / "data" / "prompt_sets.json").read_text() == param_ranges.PROMPT_SETS.read_text()


@pytest.mark.integration
def test_short_forms_end_to_end(tmp_path):
    # -M and -o as lm_eval takes them: the oracle's likelihood task gets its terminator, results land in -o.
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    argv = ["calbench", "eval", "-M", "calbench-oracle", "-t", "calbench_numeric_heldout_likelihood", "-o", str(out)]
    done = run(*argv, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = out.rglob("results_*.json")
    data = json.loads(results.read_text())["results"]["calbench_numeric_heldout_likelihood"]
    assert abs(data["seq_kl,none"]) < 1e-9 and data["canonical_mass,none"] == pytest.approx(1.0)
    assert not (cwd / "calbench_results").exists()  # -o is honoured, not replaced by calbench's default


@pytest.mark.integration
def test_calbench_eval_scores_the_answers_against_their_laws(tmp_path, references):
    # The quality table reads the run's samples log: exact draws score near 100 with a tenth of
    # their answers in the law's outer 10% and medians that follow the laws'; one answer per law
    # (its median) scores 0. The same numbers as the leaderboard's (prompt_scores, outer).
    from calbench import eval_report, evaluation
    from calbench.lm_eval_io import latest_results

    lines = {}
    for model in ("calbench-oracle", "calbench-collapsed"):
        results = latest_results(references("train", model).folder)  # the training probe at 60 samples
        assert results is not None
        table = eval_report.summaries(results)
        assert "the answers against their laws" in table
        lines[model] = {
            line.split("|")[1].strip(): [cell.strip().split(" ± ")[0] for cell in line.split("|")[2:-1]]
            for line in table.splitlines()
            if line.startswith("| calbench_numeric")
        }
    exact, flat = lines["calbench-oracle"], lines["calbench-collapsed"]
    assert set(exact) == set(flat) == {"calbench_numeric_train"}
    for task in exact:
        score, valid, _, outer_share, far, follows = map(float, exact[task])
        assert score > 90 and valid == 1 and abs(outer_share - 0.1) < 0.03 and far < 0.01 and follows > 0.9
        assert float(flat[task][0]) == 0  # score
    # below 50 samples per prompt the score is not defined: none is printed (the collapsed
    # sampler printed 88.9 at N=1 and 3.33 at N=10; issue 36, case 8)
    for n in (1, 10):
        folder = tmp_path / f"collapsed-{n}"
        evaluation.evaluate("calbench-collapsed", ["calbench_numeric_quick"], num_samples=n, output_path=folder)
        results = latest_results(folder)
        assert results is not None
        row = next(
            line for line in eval_report.summaries(results).splitlines() if line.startswith("| calbench_numeric_quick")
        )
        assert f"n/a ({n} < 50 samples per prompt)" in row.split("|")[2], row
    # a run without a samples log has no quality table, and says nothing false
    assert eval_report.quality_table(tmp_path / "nowhere" / "results_x.json", ["calbench_numeric_quick"]) == ""
