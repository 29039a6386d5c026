"""The results store refuses what it cannot vouch for, and says why."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from calbench import cli, evaluation, lm_eval_io
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.records import checks, store
from calbench.policy import PURE_SAMPLING

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "leaderboards" / "results"


def _results(gen=None, backend="calbench-hf", pretrained=None, n=(24, 24)):
    return {
        "config": {"model": backend, "model_args": {"pretrained": pretrained} if pretrained else {}, "limit": None},
        "configs": {"t": {"output_type": "generate_until", "generation_kwargs": {**PURE_SAMPLING, **(gen or {})}}},
        "n-samples": {"t": {"original": n[0], "effective": n[1]}},
    }


def test_runs_restricted_with_samples_are_refused():
    checks.check_run(_results())
    with pytest.raises(RefusedRunError, match=r"task t scored 3 of its 24 prompts \(--samples or --limit\)"):
        checks.check_run(_results(n=(24, 3)))


@pytest.mark.parametrize(
    ("gen", "named"),
    [({"repetition_penalty": 1.1}, "repetition_penalty=1.1"), ({"min_p": 0.05}, "min_p=0.05"), ({"seed": 3}, "seed=3")],
)
def test_settings_beyond_pure_sampling_are_refused(gen, named):
    with pytest.raises(RefusedRunError, match=named):
        checks.check_run(_results(gen))


def test_neutral_settings_are_accepted():
    checks.check_run(_results({"repetition_penalty": 1.0, "min_p": 0.0, "until": [], "max_gen_toks": 32}))
    for alias in ("max_new_tokens", "max_tokens", "max_completion_tokens"):  # lm-eval's names for max_gen_toks
        checks.check_run(_results({alias: 64}))


def test_the_samples_log_is_found_for_either_results_file_name(tmp_path):
    stamp = "2026-12-01T08-19-58.843839"
    for name in (f"results_{stamp}.json", f"mine_{stamp}.json"):  # --output_path DIR or DIR/mine.json
        log = tmp_path / f"samples_t_{stamp}.jsonl"
        log.write_text("x")
        assert lm_eval_io.samples_log(tmp_path / name, "t") == log


def test_a_generation_config_that_changes_sampling_is_refused_unless_overridden(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "generation_config.json").write_text(
        json.dumps({"repetition_penalty": 1.1, "top_k": 20, "eos_token_id": 2})
    )
    with pytest.raises(
        RefusedRunError, match=r"generation_config\.json sets repetition_penalty=1\.1, which hf applies"
    ):
        checks.check_generation_config(_results(backend="hf", pretrained=str(model)))
    # top_k is overridden by the task (top_k 0); once repetition_penalty is too, the run is fine.
    checks.check_generation_config(_results({"repetition_penalty": 1.0}, backend="hf", pretrained=str(model)))
    checks.check_generation_config(_results(backend="calbench-hf", pretrained=str(model)))  # reads no config
    with pytest.raises(RefusedRunError, match="which vllm applies"):
        checks.check_generation_config(_results(backend="vllm", pretrained=str(model)))


def test_every_task_overrides_the_usual_generation_config_setting():
    loaded = evaluation.task_manager({"calbench_terminator": "<e>"}, include_defaults=False).load(
        ["calbench_numeric_quick"]
    )
    gen = loaded["tasks"]["calbench_numeric_quick"].config.generation_kwargs
    from calbench.policy import active_generation_config

    assert (
        active_generation_config({"repetition_penalty": 1.3, "temperature": 0.6, "top_p": 0.9, "top_k": 5}, gen) == []
    )


@pytest.mark.parametrize(
    "name", ["../../escaped", "a/b", "a|b", "", ".hidden", "x" * 101, "tab\tname", "..", "a..b", "with space"]
)
def test_record_names_are_names_not_paths(name, tmp_path, capsys):
    results = tmp_path / "results_x.json"
    results.write_text("{}")
    argv = ["leaderboard", "add", name, "--type", "reference", "--command", "c", "--results-dir", str(tmp_path / "s")]
    assert cli.main([*argv, str(results)]) == 2
    assert "record name" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.json.tmp")) and not (tmp_path / "s").exists()
    assert not (tmp_path / "s" / f"{name}.json").resolve().exists()


def _store_with(tmp_path: Path, change) -> Path:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    record = json.loads((STORE / "oracle.json").read_text())
    change(record)
    (store_dir / "oracle.json").write_text(json.dumps(record))
    return store_dir


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["tasks"]["calbench_numeric_unseen"]["overall"].update(valid_rate=[7, 0.1]), "overall.valid_rate"),
        (lambda r: r["tasks"]["calbench_numeric_unseen"]["families"].pop("gaussian"), "missing ['gaussian']"),
        (lambda r: r.update(command=["calbench", "eval"]), "command: must be a string"),
        (lambda r: r.update(name="someone-else"), "name: 'someone-else' is not the file's name"),
        (lambda r: r.update(type="winner"), "type: 'winner' is not one of"),
        (lambda r: r["tasks"]["calbench_numeric_unseen"]["overall"].update(w1=[1.0, -0.5]), "cannot be negative"),
        (
            lambda r: r["tasks"]["calbench_numeric_unseen"]["overall"].update(w1="big"),
            "must be [value, standard error]",
        ),
        (lambda r: r["tasks"]["calbench_numeric_unseen"].update(prompts="24"), "prompts: must be a whole number"),
        (lambda r: r.update(schema=3), "unknown record schema 3"),
        (
            lambda r: r["tasks"]["calbench_numeric_unseen"].update(evaluation="elsewhere"),
            "tasks.calbench_numeric_unseen.evaluation: 'elsewhere' is not an evaluation that ran it",
        ),
        (lambda r: r["evaluations"].clear(), "evaluations: must be an object with at least one evaluation"),
        (lambda r: r["model"].update(pretrained=["a"]), "model: must be an object of strings"),
    ],
)
def test_records_are_validated_on_load_naming_file_and_field(tmp_path, change, field):
    store_dir = _store_with(tmp_path, change)
    with pytest.raises(RefusedRunError) as err:
        store.load_records(store_dir)
    assert str(store_dir / "oracle.json") in str(err.value) and field in str(err.value), str(err.value)


def test_the_committed_records_all_validate():
    loaded = store.load_records(STORE)
    assert [r["name"] for r in loaded] == [p.stem for p in sorted(STORE.glob("*.json"))]  # every file, in file order
    for record in loaded:
        checks.validate_record(copy.deepcopy(record))


def test_a_render_of_bad_records_fails_with_the_reason(tmp_path, capsys):
    store_dir = _store_with(
        tmp_path, lambda r: r["tasks"]["calbench_numeric_unseen"]["overall"].update(valid_rate=[7, 0])
    )
    assert cli.main(["leaderboard", "render", "--results-dir", str(store_dir), "--output", str(tmp_path / "o")]) == 2
    assert "valid_rate lies in [0, 1], got 7" in capsys.readouterr().err


@pytest.mark.integration
def test_each_record_takes_the_samples_log_of_its_own_run(tmp_path):
    folder = tmp_path / "runs"
    for n in (10, 20):  # two runs into one folder: the second one's logs are newer
        evaluation.evaluate("calbench-oracle", ["calbench_numeric_unseen"], num_samples=n, output_path=folder)
    first, second = sorted(folder.rglob("results_*.json"))
    for path, n in ((first, 10), (second, 20)):
        record = store.build_record("oracle", "reference", [path], "c")
        task = record["tasks"]["calbench_numeric_unseen"]
        assert task["samples_per_prompt"] == n and all(p["n"] == n for p in task["samples"])
    log = next(first.parent.glob(f"samples_calbench_numeric_unseen_{first.stem.removeprefix('results_')}.jsonl"))
    log.unlink()
    with pytest.raises(RefusedRunError, match=r"no samples log .* of this run \(only other runs' logs: samples_"):
        store.build_record("oracle", "reference", [first], "c")
    log.write_text("")
    with pytest.raises(RefusedRunError, match="the samples log is empty"):
        store.build_record("oracle", "reference", [first], "c")
    shutil.rmtree(folder)


def test_a_hub_models_cached_generation_config_is_checked_too(tmp_path, monkeypatch):
    import huggingface_hub.constants

    snapshot = tmp_path / "models--org--name" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.2}))
    (tmp_path / "models--org--name" / "refs").mkdir()
    (tmp_path / "models--org--name" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(RefusedRunError, match=r"sets repetition_penalty=1\.2"):
        checks.check_generation_config(_results(backend="hf", pretrained="org/name"))
    checks.check_generation_config(_results(backend="hf", pretrained="org/not-cached"))  # nothing to check
