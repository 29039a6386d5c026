"""The results store under tampering, races and symbolic links (issue 27, cases 8-13).

The runs are calbench-oracle's (exact sampling, no model): a few seconds each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calbench import cli, evaluation
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages import board
from calbench.leaderboard.records import checks, store
from tests.test_leaderboard_store import _results

ROOT = Path(__file__).resolve().parent.parent
TASK = "calbench_numeric_quick"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Oracle runs of the quick task, each in its own folder: 10 samples, 20 samples, 10 samples
    at T=0.7, and 10 samples on 3 prompts (--limit)."""
    base = tmp_path_factory.mktemp("runs")
    out = {}
    for name, kwargs in (
        ("plain", {}),
        ("twenty", {"num_samples": 20}),
        ("hot", {"gen_kwargs": "temperature=0.7"}),
        ("limited", {"limit": 3}),
    ):
        evaluation.evaluate("calbench-oracle", [TASK], **{"num_samples": 10, **kwargs}, output_path=base / name)
        out[name] = next((base / name).rglob("results_*.json"))
    return out


def _log(results_file: Path) -> Path:
    return next(results_file.parent.glob(f"samples_{TASK}_*.jsonl"))


def _copy_run(results_file: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(results_file, folder / results_file.name)
    shutil.copy(_log(results_file), folder / _log(results_file).name)
    return folder / results_file.name


# ---- case 8: a samples log belongs to its run by content ---------------------------------------


@pytest.mark.parametrize(
    ("other", "why"),
    [("hot", "generated with other settings"), ("limited", "3 documents logged, the run scored 42")],
)
def test_another_runs_log_renamed_to_match_is_refused(runs, tmp_path, other, why):
    mine = _copy_run(runs["plain"], tmp_path / "run")
    store.build_record("oracle", "reference", [mine], "c")  # its own log: accepted
    shutil.copy(_log(runs[other]), _log(mine))  # another run's log under this run's name
    with pytest.raises(RefusedRunError, match=f"not the samples log of this run's {TASK}.*{why}"):
        store.build_record("oracle", "reference", [mine], "c")


def test_a_request_without_settings_is_not_a_generate_request(runs, tmp_path):
    """The open-ended task on calbench-hf logs, beside each document's samples, one
    ``first_token_support`` request of the context alone: it carries no generation settings to
    check. A second request that does carry other settings is still refused."""
    mine = _copy_run(runs["plain"], tmp_path / "run")
    logged = [json.loads(line) for line in _log(mine).read_text().splitlines()]
    for record in logged:
        args = record["arguments"]
        first = args["gen_args_0"] if isinstance(args, dict) else {"arg_0": args[0][0], "arg_1": args[0][1]}
        record["arguments"] = {"gen_args_0": first, "gen_args_1": {"arg_0": first["arg_0"]}}
    _log(mine).write_text("".join(json.dumps(r) + "\n" for r in logged))
    store.build_record("oracle", "reference", [mine], "c")
    logged[5]["arguments"]["gen_args_1"]["arg_1"] = {
        **logged[5]["arguments"]["gen_args_0"]["arg_1"],
        "temperature": 0.7,
    }
    _log(mine).write_text("".join(json.dumps(r) + "\n" for r in logged))
    with pytest.raises(RefusedRunError, match=r"document 6 was generated with other settings: .*'temperature': 0\.7"):
        store.build_record("oracle", "reference", [mine], "c")


def test_a_log_missing_records_or_with_other_prompts_is_refused(runs, tmp_path):
    mine = _copy_run(runs["plain"], tmp_path / "run")
    lines = _log(mine).read_text().splitlines()
    _log(mine).write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(RefusedRunError, match="41 documents logged, the run scored 42"):
        store.build_record("oracle", "reference", [mine], "c")
    swapped = [json.loads(line) for line in lines]
    swapped[0]["prompt_hash"] = swapped[1]["prompt_hash"]
    _log(mine).write_text("".join(json.dumps(r) + "\n" for r in swapped))
    with pytest.raises(RefusedRunError, match="task hash mismatch"):
        store.build_record("oracle", "reference", [mine], "c")


# ---- case 9: stored samples are validated on load ------------------------------------------------


@pytest.fixture
def stored(runs, tmp_path):
    path = store.save_record(store.build_record("oracle", "reference", [runs["plain"]], "c"), tmp_path / "store")
    return path, tmp_path / "store" / "samples" / path.name


def test_a_hand_edited_samples_file_is_refused(stored):
    path, samples = stored
    assert len(store.load_record(path)["tasks"][TASK]["samples"]) == 42
    data = json.loads(samples.read_text())
    data[TASK][0]["values"] *= 40  # 400 valid answers of 10 responses
    samples.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    with pytest.raises(RefusedRunError, match="SHA-256 differs"):
        store.load_record(path)
    head = json.loads(path.read_text())
    del head["samples_sha256"]  # an edit of both files is still checked field by field
    path.write_text(json.dumps(head))
    with pytest.raises(RefusedRunError, match=r"samples\[1\]\.values: must be at most n=10 finite numbers"):
        store.load_record(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(n=-3), r"\.n: must be a whole number"),
        (lambda p: p.update(family="nosuch"), "not a calbench law"),
        (lambda p: p["values"].append(float("inf")), "finite numbers"),
    ],
)
def test_impossible_stored_samples_are_refused(edit, message):
    entry = {"prompts": 1}
    good = {"family": "poisson", "target": "poisson(lam=3.7)", "n": 10, "values": [1.0, 2.0]}
    checks.validate_stored("s", "samples", [good], entry)
    bad = json.loads(json.dumps(good))
    edit(bad)
    with pytest.raises(RefusedRunError, match=message):
        checks.validate_stored("s", "samples", [bad], entry)
    with pytest.raises(RefusedRunError, match="2 samples stored, the task scored 1"):
        checks.validate_stored("s", "samples", [good, good], entry)
    with pytest.raises(RefusedRunError, match=r"scores\.exact_flexible: 7\.0 is not a possible value"):
        checks.validate_stored("s", "items", [{"scores": {"exact_flexible": 7.0}}], {})


# ---- case 10: concurrent writers ----------------------------------------------------------------

ADD = """
import sys, time
from calbench import cli
from calbench.leaderboard.records import store
pause = float(sys.argv[1])
write = store.atomic_write
def slow(path, text, no_links=None):  # the first writer dawdles between the samples and the head
    write(path, text, no_links)
    if pause and "samples" in str(path):
        time.sleep(pause)
store.atomic_write = slow
sys.exit(cli.main(["leaderboard", "add", "oracle", "--type", "reference", "--command", "c",
                   "--results-dir", *sys.argv[2:]]))
"""


@pytest.mark.integration
def test_concurrent_adds_of_one_name_never_break_the_store(runs, tmp_path):
    """Two writers of one name at once, each with its own run (10 and 20 samples per prompt), the
    second starting while the first is between its samples and its head: the store always holds
    one whole record, its samples from the same run as its head."""
    for round_ in range(4):
        store_dir = tmp_path / f"store-{round_}"
        replace = ["--replace"] if round_ % 2 else []
        procs = []
        for run, pause in (("plain", "1.5"), ("twenty", "0")):
            argv = [sys.executable, "-c", ADD, pause, str(store_dir), str(runs[run]), *replace]
            procs.append(subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            if run == "plain":  # the second starts once the first has written its samples
                deadline = time.time() + 120
                while not (store_dir / "samples" / "oracle.json").exists():
                    assert procs[0].poll() is None and time.time() < deadline, procs[0].stderr.read()
                    time.sleep(0.02)
        codes = [p.wait(timeout=300) for p in procs]
        errs = [p.stderr.read() for p in procs if p.stderr]
        if replace:
            assert codes == [0, 0], errs
        else:  # one writes, the other finds its record and is refused in one line
            assert sorted(codes) == [0, 2], errs
            assert any("exists: pass --replace" in e for e in errs)
        task = store.load_record(store_dir / "oracle.json")["tasks"][TASK]
        assert len(task["samples"]) == 42
        assert {p["n"] for p in task["samples"]} == {task["samples_per_prompt"]}  # head and samples of one run


def test_add_replaces_a_record_only_when_told(runs, tmp_path, capsys):
    argv = ["leaderboard", "add", "oracle", "--type", "reference", "--command", "c", "--results-dir", str(tmp_path)]
    assert cli.main([*argv, str(runs["plain"])]) == 0
    assert cli.main([*argv, str(runs["plain"])]) == 2
    assert "oracle.json exists: pass --replace" in capsys.readouterr().err
    assert cli.main([*argv, "--replace", str(runs["plain"])]) == 0


# ---- case 11: no write through a link -----------------------------------------------------------


def test_a_symlinked_samples_folder_or_record_is_never_written_through(runs, tmp_path):
    record = store.build_record("oracle", "reference", [runs["plain"]], "c")
    outside = tmp_path / "outside"
    outside.mkdir()
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (store_dir / "samples").symlink_to(outside)
    with pytest.raises(RefusedRunError, match=r"samples is a symbolic link"):
        store.save_record(record, store_dir)
    assert list(outside.iterdir()) == [] and not (store_dir / "oracle.json").exists()
    (store_dir / "samples").unlink()
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    (store_dir / "oracle.json").symlink_to(victim)
    with pytest.raises(RefusedRunError, match=r"oracle\.json is a symbolic link"):
        store.save_record(record, store_dir)
    assert victim.read_text() == "precious"
    (store_dir / store.STORE_LOCK).unlink()
    (store_dir / store.STORE_LOCK).symlink_to(tmp_path / "lock-victim")
    (store_dir / "oracle.json").unlink()
    with pytest.raises(RefusedRunError, match="cannot lock the results folder"):
        store.save_record(record, store_dir)
    assert not (tmp_path / "lock-victim").exists()


# ---- case 12: the generation config is checked, or the run refused ---------------------------------


def test_a_model_that_cannot_be_found_from_here_is_refused_not_skipped(tmp_path, monkeypatch):
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "generation_config.json").write_text(json.dumps({"min_p": 0.1}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RefusedRunError, match=r"sets min_p=0\.1"):
        checks.check_generation_config(_results(backend="hf", pretrained="tiny"))
    monkeypatch.chdir(tmp_path.parent)  # the same results file, read from elsewhere
    with pytest.raises(RefusedRunError, match="the model tiny cannot be found from"):
        checks.check_generation_config(_results(backend="hf", pretrained="tiny"))
    checks.check_generation_config(_results(backend="calbench-hf", pretrained="tiny"))  # reads no generation config


# ---- case 13: records keyed by the system; commands shown as code --------------------------------------


def test_two_models_of_one_folder_name_are_two_systems():
    part = {"tasks": {}, "model": {"backend": "hf", "pretrained": "tiny", "weights_sha256": "aa", "adapter": None}}
    other = {"tasks": {}, "model": {**part["model"], "weights_sha256": "bb"}}
    with pytest.raises(RefusedRunError, match="the evaluations come from different systems"):
        store.assemble_record("tiny", "base", "c", {"run-1": part, "run-2": other})


def test_a_command_with_a_code_fence_stays_code(runs):
    record = store.build_record("oracle", "reference", [runs["plain"]], "calbench eval\n```\n# injected heading\n```")
    page = board.render([record])["README.md"]
    block = page[page.index("**oracle**") :]
    fence = block.splitlines()[2]
    assert fence == "````bash" and "\n````\n" in block  # a longer fence than any inside
    assert "\n# injected heading\n" in block.split("````bash", 1)[1].split("\n````", 1)[0]


def test_a_code_span_is_longer_than_any_backticks_inside():
    from calbench.markdown import code_span

    assert code_span("a `b` c") == "``a `b` c``"
    assert code_span("`x`") == "`` `x` ``"
    assert code_span("one\ntwo") == "`one two`"


@pytest.mark.skipif(os.geteuid() != 0, reason="checked as root only: the tour ran as root")
def test_root_is_no_exception_to_the_link_checks(tmp_path):
    from calbench.provenance import LinkedPathError, atomic_write

    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "sub").symlink_to(tmp_path)
    with pytest.raises(LinkedPathError):
        atomic_write(tmp_path / "root" / "sub" / "f", "x", no_links=tmp_path / "root")


def test_a_per_request_seed_with_repeats_is_refused_as_the_collapse_it_is():
    """A seed in the generation settings and ``repeats: K`` make vLLM return K copies of one sample."""
    run = _results({"seed": 1234})
    run["configs"]["t"]["repeats"] = 1000
    with pytest.raises(RefusedRunError, match="1000 identical samples, not 1000 draws"):
        checks.check_run(run)
    run["configs"]["t"]["repeats"] = 1  # one sample per prompt: still not pure sampling's settings
    with pytest.raises(RefusedRunError, match="did not sample at pure T=1 \\(seed=1234\\)"):
        checks.check_run(run)


def test_a_file_of_the_store_that_is_not_a_record_stops_no_other_rows_run(stored):
    """Issue 36, case 14: one JSON file in the store that is not a record blocked every row's run
    (the runner read the whole store to find one record): now only the named record is read."""
    path, _ = stored
    (path.parent / "notes.json").write_text('{"not": "a record"}')
    (path.parent / "broken.json").write_text("{")
    (record,) = store.named_records(path.parent, ["oracle"])
    assert record["name"] == "oracle"
    with pytest.raises(RefusedRunError, match="no run record named absent"):
        store.named_records(path.parent, ["absent"])
    with pytest.raises(RefusedRunError, match="record name"):
        store.named_records(path.parent, ["../oracle"])


def test_an_edited_embedded_recipe_is_refused(stored):
    """Issue 36, case 17: load_record checked neither the embedded recipe against recipe_sha256."""
    import json

    path, _ = stored
    record = json.loads(path.read_text())
    record["recipe"] = {"backend": "calbench-oracle", "evaluations": {}}
    record["recipe_sha256"] = store.recipe_hash({"backend": "something else"})
    path.write_text(json.dumps(record))
    with pytest.raises(RefusedRunError, match="recipe: not the recipe its recipe_sha256 names"):
        store.load_record(path)


def test_stored_answers_of_another_sample_size_than_the_header_are_refused(stored):
    """Issue 36, case 17: the header's samples_per_prompt against the stored samples."""
    import hashlib
    import json

    path, samples = stored
    record = json.loads(path.read_text())
    record["tasks"][TASK]["samples_per_prompt"] = 1000  # the run drew 10 per prompt
    path.write_text(json.dumps(record))
    with pytest.raises(RefusedRunError, match="10 responses, the record says 1000 samples per prompt"):
        store.load_record(path)
    assert hashlib.sha256(samples.read_bytes()).hexdigest() == record["samples_sha256"]  # the answers are untouched


def test_a_training_that_never_started_says_so(tmp_path):
    """Issue 36, case 17: a missing model was reported as 'training failed (its run folder ... is
    kept: rerun to resume)' though nothing was written."""
    from calbench.leaderboard.run.commands import training_failed

    assert "did not start (nothing was written" in training_failed("row", tmp_path / "train")
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "calbench_run.json").write_text("{}")
    assert "is kept: rerun to resume" in training_failed("row", tmp_path / "train")
