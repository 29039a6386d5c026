"""Leaderboard rows as recipes: reading them (defaults, skipped evaluations, refusals naming the
field), and `calbench leaderboard run` end to end on the reference systems and a tiny adapter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from calbench import cli
from calbench.leaderboard.errors import RecipeError
from calbench.leaderboard.recipes import loader
from calbench.leaderboard.recipes.fields import merge
from calbench.leaderboard.recipes.loader import load_row
from calbench.leaderboard.records import store
from calbench.train_record import train_arguments

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "leaderboards" / "rows"


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


DEFAULTS = """\
backend: calbench-hf
model_args: {dtype: float32}
chat_template: true
evaluations:
  quick: {tasks: [calbench_numeric_quick], samples_per_prompt: 10}
  sample-free: {tasks: [calbench_numeric_unseen_exact]}
  drift: {kind: drift}
train: {use_cpu: true}
"""


def test_a_row_states_only_what_differs_from_the_defaults(tmp_path):
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(
        tmp_path,
        "tiny-soft.yaml",
        "type: fine-tuned adapter\nmodel: some/model\n"
        "adapter: {path: adapters/tiny, train: {method: soft, max_steps: 2}}\n"
        "evaluations:\n  quick: {samples_per_prompt: 20}\n  sample-free: false\n",
    )
    recipe = load_row(row)
    assert recipe.name == "tiny-soft" and recipe.backend == "calbench-hf" and recipe.chat_template
    assert [e.name for e in recipe.evaluations] == ["quick", "drift"]  # sample-free skipped
    quick = recipe.evaluation("quick")
    assert quick.samples_per_prompt == 20 and quick.tasks == ("calbench_numeric_quick",) and quick.chat_template
    assert recipe.train == {"use_cpu": True, "method": "soft", "max_steps": 2}
    assert recipe.command == f"calbench leaderboard run {row.as_posix()}"
    resolved = recipe.resolved()
    assert resolved["adapter"] == {"path": "adapters/tiny", "train": recipe.train}
    assert recipe.sha256() == load_row(row).sha256() and len(recipe.sha256()) == 16
    changed = _write(tmp_path, "tiny-soft.yaml", row.read_text().replace("20", "30"))
    assert load_row(changed).sha256() != recipe.sha256()
    assert train_arguments("some/model", recipe.train) == [  # a recipe without parameters: the grid, as ever
        "--model", "some/model", "--parameters", "grid", "--widen", "1.0", "--accumulation", "legacy",
        "--use-cpu", "--method", "soft", "--max-steps", "2",
    ]  # fmt: skip
    fresh = {**recipe.train, "parameters": "fresh"}  # fresh parameters without a widening: the paper's ranges
    assert train_arguments("some/model", fresh)[2:6] == ["--parameters", "fresh", "--widen", "1.0"]
    wide = {**recipe.train, "parameters": "fresh", "widen": 2}
    assert train_arguments("some/model", wide)[2:6] == ["--parameters", "fresh", "--widen", "2"]
    mean = {**recipe.train, "accumulation": "mean"}  # a recipe of today's steps says so
    assert train_arguments("some/model", mean)[6:8] == ["--accumulation", "mean"]


def test_a_row_without_an_adapter_runs_no_drift(tmp_path):
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(tmp_path, "base.yaml", "type: base\nmodel: some/model\n")
    assert [e.name for e in load_row(row).evaluations] == ["quick", "sample-free"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("type: winner\nmodel: m\n", "type: 'winner' is not one of"),
        ("type: base\n", "model: --model calbench-hf needs a model"),
        ("type: base\nmodel: m\nmodel_args: {pretrained: x}\n", "pretrained and peft come from model:"),
        ("type: base\nmodel: m\nevaluations: {quick: {samples_per_prompt: 0}}\n", "quick.samples_per_prompt"),
        ("type: base\nmodel: m\nevaluations: {quick: {taks: [x]}}\n", "unknown field(s) ['taks']"),
        ("type: base\nmodel: m\nevaluations: {quick: false, sample-free: false}\n", "every evaluation is skipped"),
        ("type: base\nmodel: m\nadapter: {path: a, train: {output: x}}\n", "['output'] are the run's"),
        ("type: base\nmodel: m\ncolour: blue\n", "unknown field(s) ['colour']"),
        ("type: reference\nbackend: calbench-oracle\nmodel: m\n", "the reference calbench-oracle takes no model"),
        ("- a list\n", "a recipe is a mapping of fields"),
        ("type: [unclosed\n", "not valid YAML"),
        # issue 36: aliases, duplicate keys, odd values, spliced model arguments, sizes (cases 9, 10, 12, 17)
        ("a: &a [x, x, x]\nb: &b [*a, *a, *a]\ntype: base\nmodel: m\n", "aliases (*name) are not allowed"),
        ("type: base\nmodel: m\ntype: reference\n", "the key 'type' is given twice"),
        ("type: base\nmodel: m\nevaluations: {quick: {metadata: {d: 2026-01-01}}}\n", "date values are not"),
        ("type: base\nmodel: m\nmodel_args: {dtype: !!binary aGk=}\n", "bytes values are not"),
        ("type: base\nmodel: m\nresults_dir: 5\n", "results_dir: must be a folder's path"),
        ("type: base\nmodel: m\nx: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("type: base\nmodel: m\nmodel_args: {dtype: 'float32,peft=/x'}\n", "a value has no ',' or '='"),
        ("type: base\nmodel: m\nmodel_args: {trust_remote_code: true}\n", "runs no model's own code"),
        ("type: base\nmodel: m\nevaluations: {quick: {samples_per_prompt: 1000000000}}\n", "from 1 to 100000"),
        ("type: base\nmodel: m\nevaluations: {quick: {samples_per_prompt: true}}\n", "from 1 to 100000"),
        # the hand re-run of issue 36: a comma in the model's or the adapter's path, options spliced in train:
        ("type: base\nmodel: 'm,peft=/x'\n", "model: 'm,peft=/x': a model or adapter path has no"),
        ("type: fine-tuned adapter\nmodel: m\nadapter: {path: 'a,dtype=float16'}\n", "adapter.path: 'a,dtype"),
        (
            "type: base\nmodel: m\nadapter: {path: a, train: {max_steps: [1, --overwrite]}}\n",
            "train.max_steps: must be",
        ),
        ("type: base\nmodel: m\nadapter: {path: a, train: {method: --overwrite}}\n", "train.method: must be a plain"),
        # a full fine-tune's row (fine_tune: its card folder and the training that rebuilds its weights)
        ("type: fine-tuned\nmodel: m\nfine_tune: {card: c, train: {method: hard}}\n", "finetune: must be full"),
        ("type: fine-tuned adapter\nmodel: m\nfine_tune: {card: c, train: {finetune: full}}\n", "of type fine-tuned"),
        ("type: fine-tuned\nmodel: m\nadapter: {path: a}\nfine_tune: {card: c}\n", "an adapter or a full fine-tune"),
        ("type: fine-tuned\nmodel: m\nfine_tune: {train: {finetune: full}}\n", "fine_tune.card: name the folder"),
        ("type: fine-tuned\nmodel: m\nfine_tune: {card: c}\n", "fine_tune.train: the calbench train options"),
        ("type: fine-tuned\nmodel: m\nfine_tune: {card: c, path: w}\n", "unknown field(s) ['path']"),
        ("type: fine-tuned\nmodel: m\nfine_tune: {card: c, train: {finetune: full, output: o}}\n", "are the run's"),
    ],
)
def test_bad_recipes_are_refused_naming_the_file_and_field(tmp_path, text, message):
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(tmp_path, "row.yaml", text)
    with pytest.raises(RecipeError, match=re.escape(message)) as err:
        load_row(row)
    assert str(row) in str(err.value) and "\n" not in str(err.value)


def test_a_protocols_recipe_takes_a_number_of_samples_not_a_boolean(tmp_path):
    path = _write(
        tmp_path, "protocols.yaml", "kind: protocols\nsamples_per_prompt: true\nsystems: [a]\nprotocols: [batch]\n"
    )
    with pytest.raises(RecipeError, match="samples_per_prompt: must be a whole number"):
        loader.load_protocols(path)


HOSTILE_NAMES = [
    ("/tmp/calbench-victim", "is not a folder name"),
    ("../../x", "is not a folder name"),
    ("''", "is not a folder name"),
    ("'.'", "is not a folder name"),
    ("train", "is reserved"),
    ("points", "is reserved"),
    ("5", "must be a string"),
]


@pytest.mark.parametrize(("name", "message"), HOSTILE_NAMES)
def test_an_evaluation_name_is_one_safe_folder_name(tmp_path, name, message):
    """Issue 36, case 1: a row's evaluation folder is <workdir>/<row>/<evaluation>, deleted before
    each run: a path, an escape, the row's own training run, or a number is refused at load."""
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(
        tmp_path, "row.yaml", f"type: base\nmodel: m\nevaluations:\n  {name}: {{tasks: [calbench_numeric_quick]}}\n"
    )
    with pytest.raises(RecipeError, match=message):
        load_row(row)


def test_two_evaluations_named_alike_are_refused(tmp_path):
    _write(tmp_path, "defaults.yaml", "backend: calbench-oracle\nevaluations: {}\n")
    row = _write(tmp_path, "row.yaml", "type: reference\nevaluations:\n  '5': {tasks: [a]}\n  5: {tasks: [b]}\n")
    with pytest.raises(RecipeError, match=r"must be a string|named twice"):
        load_row(row)


@pytest.mark.parametrize(("name", "message"), HOSTILE_NAMES[:4])
def test_a_curve_run_name_is_one_safe_folder_name(tmp_path, name, message):
    from calbench.leaderboard.recipes import curves

    path = _write(
        tmp_path,
        "curve.yaml",
        "kind: curve\nmodel: m\nprotocol: {quick: {tasks: [calbench_numeric_quick]}}\n"
        f"runs:\n  {name}: {{train: {{method: soft, effective_batch: 4}}}}\n",
    )
    with pytest.raises(RecipeError, match=message):
        curves.load(path)


def test_the_published_recipes_read_and_match_their_records():
    stored = {r["name"]: r for r in store.load_records(ROOT / "leaderboards" / "results")}
    paths = loader.rows_in(ROWS)
    assert {p.stem for p in paths} == set(stored)  # one recipe per published row, and no other
    for path in paths:
        recipe = load_row(path)
        record = stored[recipe.name]
        assert record["recipe"] == recipe.resolved() and record["recipe_sha256"] == recipe.sha256(), recipe.name
        assert record["command"] == f"calbench leaderboard run leaderboards/rows/{path.name}"
        assert set(record["evaluations"]) == set(recipe.names()), recipe.name
        if recipe.fine_tune is not None:  # its weights are not committed: its card names the record's hash
            card = (ROOT / recipe.fine_tune / "README.md").read_text()
            assert (
                f"(`model.weights_sha256`, `calbench.provenance.weights_hash`): `{record['model']['weights_sha256']}`"
                in card
            )
            assert not list((ROOT / recipe.fine_tune).glob("*.safetensors")), recipe.name
    matrix = loader.load_protocols(ROWS / "protocols.yaml")
    protocol_store = {r["name"]: r for r in store.load_records(ROOT / "leaderboards" / "results" / "protocols")}
    assert {r.name for r in matrix} == set(protocol_store)
    for recipe in matrix:
        assert protocol_store[recipe.name]["recipe"] == recipe.resolved()
        assert [e.tasks[0] for e in recipe.evaluations][:2] == [
            "calbench_numeric_quick",
            "calbench_numeric_quick_batch",
        ]
    trade = loader.load_tradeoff(ROWS / "tradeoff.yaml")
    assert {trade.base, *trade.adapters} <= set(stored)


def test_one_loader_reads_every_recipe_as_its_kind():
    """``loader.load`` gives each published recipe file its kind's object, the same one its kind's loader gives."""
    from calbench.leaderboard.recipes import curves

    expected = {"row": loader.Recipe, "protocols": loader.ProtocolMatrix, "tradeoff": loader.TradeoffRecipe}
    expected["curve"] = curves.Curves
    kinds = set()
    for path in loader.recipe_files(ROWS):
        kind = loader.kind_of(path)
        loaded = loader.load(path)
        assert isinstance(loaded, expected[kind]), path.name
        kinds.add(kind)
        if kind == "row":
            assert loaded == load_row(path)
        elif kind == "protocols":
            assert list(loaded.rows) == loader.load_protocols(path)
        elif kind == "curve":
            assert loaded == curves.load(path)
    assert kinds == set(loader.KINDS)
    assert "defaults.yaml" not in {p.name for p in loader.recipe_files(ROWS)}


@pytest.mark.integration
def test_a_committed_adapter_is_checked_against_its_recipe():
    """Each published adapter's calbench_train.json agrees with its recipe (calbench train --same-as)."""
    from calbench.leaderboard.run.rows import ensure_adapter

    for path in loader.rows_in(ROWS):
        recipe = load_row(path)
        if recipe.adapter is not None:
            # a missing adapter would be trained: a published row's must be committed
            assert (Path(recipe.adapter) / "adapter_config.json").is_file(), f"{path.name}: no adapter committed"
            ensure_adapter(recipe, Path("unused"))  # refuses (RefusedRunError) on any disagreement


@pytest.mark.integration
def test_an_adapter_trained_otherwise_is_refused(tmp_path):
    from calbench.leaderboard.errors import RefusedRunError
    from calbench.leaderboard.run.rows import ensure_adapter

    soft = ROOT / "leaderboards" / "adapters" / "smollm2-135m-instruct-soft"
    row = _write(
        tmp_path,
        "soft.yaml",
        "type: fine-tuned adapter\nmodel: smollm2-135m-instruct\n"
        f"adapter: {{path: {soft}, train: {{method: soft, max_steps: 100, batch_size: 8, effective_batch: 16}}}}\n",
    )
    _write(tmp_path, "defaults.yaml", (ROWS / "defaults.yaml").read_text())
    with pytest.raises(RefusedRunError, match=r"max_steps: asked 100, adapter 60"):
        ensure_adapter(load_row(row), tmp_path / "work")


def test_merge_is_deep_and_false_removes():
    base = {"a": {"x": 1, "y": 2}, "e": {"s": {"n": 1}, "t": {"n": 2}}}
    assert merge(base, {"a": {"y": 3}, "e": {"t": False}}) == {"a": {"x": 1, "y": 3}, "e": {"s": {"n": 1}, "t": False}}
    assert base["a"]["y"] == 2  # the defaults are not changed


REFERENCE_DEFAULTS = """\
backend: calbench-oracle
chat_template: false
evaluations:
  quick: {tasks: [calbench_numeric_quick], samples_per_prompt: 60}
  sample-free: {tasks: [calbench_numeric_unseen_exact]}
"""


@pytest.mark.integration
def test_run_stores_a_record_then_skips_what_is_finished(tmp_path, capsys, monkeypatch):
    rows = tmp_path / "rows"
    _write(rows, "defaults.yaml", REFERENCE_DEFAULTS)
    row = _write(rows, "exact.yaml", "type: reference\n")
    store_dir, work = tmp_path / "store", tmp_path / "work"
    argv = ["leaderboard", "run", str(row), "--results-dir", str(store_dir), "--workdir", str(work)]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "exact: quick: calbench eval --model calbench-oracle" in err and "not rendered" in err
    record = store.load_record(store_dir / "exact.json")
    assert record["recipe"] == load_row(row).resolved() and set(record["evaluations"]) == {"quick", "sample-free"}
    assert record["tasks"]["calbench_numeric_quick"]["evaluation"] == "quick"
    assert len(record["tasks"]["calbench_numeric_quick"]["samples"]) == 42
    assert len(record["tasks"]["calbench_numeric_unseen_exact"]["items"]) == 24  # per-prompt sample-free records
    # lm-eval's folder named after the model is flattened away: the output is named after row and evaluation
    assert sorted(p.name for p in (work / "exact" / "quick").iterdir())[0].startswith("calbench_evaluation")
    assert not [p for p in (work / "exact").rglob("*") if p.is_dir() and p.parent.name in ("quick", "sample-free")]
    marker = json.loads((work / "exact" / "quick" / "calbench_evaluation.json").read_text())
    assert marker["recipe_sha256"] == record["evaluations"]["quick"]["recipe_sha256"]
    # A rerun runs nothing: both evaluations are in the record (and their output is there too), and
    # the record keeps the commit that made its numbers, whatever the commit now.
    monkeypatch.setattr(store, "calbench_commit", lambda: "a later commit")
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "calbench eval" not in err and err.count("finished in") == 2
    assert store.load_record(store_dir / "exact.json")["calbench_commit"] == record["calbench_commit"]
    # Without the work folder, the record alone says they are finished.
    import shutil

    shutil.rmtree(work)
    assert cli.main(argv) == 0
    assert capsys.readouterr().err.count("finished (in the record)") == 2
    assert store.differences(record, store.load_record(store_dir / "exact.json")) == []
    # A changed evaluation reruns alone; --only picks; an unknown name is refused before anything runs.
    _write(rows, "defaults.yaml", REFERENCE_DEFAULTS.replace("60", "70"))
    assert cli.main([*argv, "--only", "quick"]) == 0
    err = capsys.readouterr().err
    assert err.count("calbench eval") == 1 and "finished (in the record)" in err
    again = store.load_record(store_dir / "exact.json")
    assert again["tasks"]["calbench_numeric_quick"]["samples_per_prompt"] == 70
    assert again["calbench_commit"] == "a later commit"  # new numbers: the commit that made them
    assert store.differences(record, again) == [
        f"calbench_numeric_quick: {k}" for k in ("overall", "families", "samples", "samples_per_prompt")
    ]
    assert cli.main([*argv, "--only", "nothing"]) == 2
    assert "no evaluation 'nothing'" in capsys.readouterr().err
    # compare: the same numbers, or the differences and exit 1
    assert cli.main(["leaderboard", "compare", str(store_dir / "exact.json"), str(store_dir / "exact.json")]) == 0
    assert "identical numbers: 2 tasks" in capsys.readouterr().out


def _tiny_training_row(rows: Path, name: str, head: str, model: Path, more: str = "") -> Path:
    """A row that trains on the tiny model in two steps: ``head`` opens its type and its
    ``adapter:`` or ``fine_tune:`` mapping, which gets the training options (``more`` added)."""
    _write(rows, "defaults.yaml", "backend: calbench-hf\nchat_template: true\ntrain: {use_cpu: true}\n")
    train = "method: hard, max_steps: 2, batch_size: 2, effective_batch: 2, prompts: 30, max_bins: 64"
    return _write(
        rows,
        f"{name}.yaml",
        f"{head}, train: {{{train}{', ' + more if more else ''}}}}}\nmodel: {model}\n"
        "evaluations:\n  quick: {tasks: [calbench_numeric_quick], samples_per_prompt: 2}\n  drift: {kind: drift}\n",
    )


@pytest.mark.integration
def test_run_trains_a_missing_adapter_then_evaluates_it(tiny_split, tmp_path, capsys):
    adapter = tmp_path / "adapters" / "tiny-hard"
    row = _tiny_training_row(
        tmp_path / "rows", "tiny-hard", f"type: fine-tuned adapter\nadapter: {{path: {adapter}", tiny_split
    )
    store_dir, work = tmp_path / "store", tmp_path / "work"
    argv = ["leaderboard", "run", str(row), "--results-dir", str(store_dir), "--workdir", str(work)]
    assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
    assert "training the adapter: calbench train --model" in capsys.readouterr().err
    assert (adapter / "adapter_model.safetensors").is_file() and not (adapter / "tokenizer.json").exists()
    trained = json.loads((adapter / "calbench_train.json").read_text())["config"]
    assert trained["output"] == "<workdir>/tiny-hard/train"  # not this machine's run folder
    record = store.load_record(store_dir / "tiny-hard.json")
    assert record["model"]["adapter_sha256"] and record["drift"]["drift_kl"] >= 0
    assert set(record["evaluations"]) == {"quick", "drift"}
    # The adapter is there now: a changed training option is refused, and nothing is retrained.
    row.write_text(row.read_text().replace("max_steps: 2", "max_steps: 3"))
    assert cli.main(argv) == 2
    assert "max_steps: asked 3, adapter 2" in capsys.readouterr().err


@pytest.mark.integration
def test_a_full_fine_tune_row_keeps_its_weights_in_the_work_folder_and_publishes_their_card_and_hash(
    tiny_split, tmp_path, capsys
):
    """A ``fine_tune:`` row trains its weights in ``<workdir>/<row>/train``, evaluates them there,
    and writes only their card and training record to its card folder, the card naming the recipe
    that rebuilds them and their SHA-256, the record their hash; a rerun trains and evaluates nothing,
    and a changed training option is refused."""
    from calbench.provenance import sha256_file, weights_hash

    card = tmp_path / "fine-tunes" / "tiny-full"
    row = _tiny_training_row(
        tmp_path / "rows",
        "tiny-full",
        f"type: fine-tuned\nfine_tune: {{card: {card}",
        tiny_split,
        "finetune: full, save_steps: 1",
    )
    assert [e.name for e in load_row(row).evaluations] == ["quick"]  # no adapter: no drift
    store_dir, work = tmp_path / "store", tmp_path / "work"
    argv = ["leaderboard", "run", str(row), "--results-dir", str(store_dir), "--workdir", str(work)]
    assert cli.main(argv) == 0, capsys.readouterr().err[-3000:]
    assert "training the full fine-tune" in capsys.readouterr().err
    weights = work / "tiny-full" / "train" / "adapter"
    assert (weights / "model.safetensors").is_file()
    assert sorted(p.name for p in card.iterdir()) == sorted(
        ["README.md", "calbench_train.json", "config.json", "generation_config.json"]
    )
    assert json.loads((card / "calbench_train.json").read_text())["config"]["output"] == "<workdir>/tiny-full/train"
    record = store.load_record(store_dir / "tiny-full.json")
    assert record["type"] == "fine-tuned" and record["model"]["weights_sha256"] == weights_hash(weights)
    assert record["model"]["adapter"] is None
    assert record["recipe"]["fine_tune"]["card"] == str(card)
    command = record["evaluations"]["quick"]["command"]
    assert "pretrained=<workdir>/tiny-full/train/adapter " in command and str(work) not in command
    text = (card / "README.md").read_text()
    assert f"`calbench leaderboard run {row.as_posix()} --workdir DIR`" in text
    assert sha256_file(weights / "model.safetensors") in text and weights_hash(weights) in text
    assert "<this folder>" not in text  # the card's folder holds no weights
    # A rerun trains and evaluates nothing, and rewrites a card that names other weights; a finished
    # run without its weights and a changed training option are refused, the weights kept.
    (card / "README.md").write_text(text.replace(weights_hash(weights), "0123456789abcdef"))
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "calbench train" not in err and "calbench eval" not in err and "finished in" in err
    assert (card / "README.md").read_text() == text
    import shutil

    shutil.move(weights, tmp_path / "kept")
    assert cli.main(argv) == 2
    assert "holds a finished run without its weights" in capsys.readouterr().err
    shutil.move(tmp_path / "kept", weights)
    row.write_text(row.read_text().replace("max_steps: 2", "max_steps: 3"))
    assert cli.main(argv) == 2
    assert "max_steps: asked 3, adapter 2" in capsys.readouterr().err
    assert weights_hash(weights) == record["model"]["weights_sha256"]


def test_a_full_fine_tune_without_its_weights_is_not_trained_under_no_train_nor_put_in_the_protocol_matrix(
    tmp_path, capsys
):
    rows = tmp_path / "rows"
    _write(rows, "defaults.yaml", DEFAULTS)
    row = _write(rows, "full.yaml", "type: fine-tuned\nmodel: m\nfine_tune: {card: c, train: {finetune: full}}\n")
    argv = ["leaderboard", "run", str(row), "--workdir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "s")]
    assert cli.main([*argv, "--no-train"]) == 2
    assert "--no-train forbids training them" in capsys.readouterr().err
    assert not (tmp_path / "w").exists() and not (tmp_path / "s").exists()
    matrix = _write(
        rows, "protocols.yaml", "kind: protocols\nsystems: [full]\nprotocols: [independent]\nsamples_per_prompt: 10\n"
    )
    with pytest.raises(
        RecipeError, match="full is a full fine-tune: the matrix takes rows whose weights are committed"
    ):
        loader.load_protocols(matrix)


def test_the_demo_shows_each_methods_best_smollm2_adapter_on_the_leaderboard():
    import csv

    from calbench import demo

    with (ROOT / "leaderboards" / "tables" / "headline.csv").open() as f:
        scores = {row["system"]: float(row["score ↑"].split(" ± ")[0]) for row in csv.DictReader(f)}
    best: dict[str, float] = {}
    for path in loader.rows_in(ROWS):
        recipe = load_row(path)
        if recipe.adapter is None or recipe.model != "smollm2-135m-instruct" or recipe.train is None:
            continue
        method = recipe.train["method"]
        best[method] = max(best.get(method, -1.0), scores[recipe.name])
    assert set(best) == set(demo.ADAPTER_ROWS)
    for method, row in demo.ADAPTER_ROWS.items():  # a tie keeps the adapter the demo shows
        assert scores[row] == best[method], f"the demo's {method} adapter {row} is not its method's best"


# ---- issue 36: identity by weights, exact training options (cases 3 and 16) -------------------


def test_a_recipes_training_options_are_named_exactly(tmp_path):
    """Case 16: argparse would take ``overwri`` for --overwrite; a recipe names options exactly."""
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(tmp_path, "row.yaml", "type: base\nmodel: m\nadapter: {path: a, train: {overwri: true}}\n")
    with pytest.raises(RecipeError, match=r"unknown calbench train option\(s\) \['overwri'\]"):
        load_row(row)


def test_calbench_train_takes_no_abbreviation(capsys):
    from calbench.training.cli import main as train_main

    with pytest.raises(SystemExit) as done:
        train_main(["--overwri"])
    assert done.value.code == 2 and "unrecognized arguments: --overwri" in capsys.readouterr().err


def _adapter_record(folder: Path, **options) -> Path:
    from calbench.training.config import TrainConfig

    folder.mkdir(parents=True)
    config = TrainConfig(**options).resolve().to_dict()
    (folder / "calbench_train.json").write_text(json.dumps({"config": config, "base_model": options.get("base")}))
    return folder


def test_same_as_ignores_the_order_of_target_modules_and_a_resolved_chat(tiny_split, tmp_path):
    from calbench.training.cli import same_as
    from calbench.training.config import TrainConfig

    adapter = _adapter_record(tmp_path / "a", model=str(tiny_split), target_modules=("q_proj", "v_proj"))
    asked = TrainConfig(
        model=str(tiny_split), target_modules=("v_proj", "q_proj"), chat=True
    )  # tiny_split has a template
    assert same_as(asked, adapter) == []
    other = TrainConfig(model=str(tiny_split), target_modules=("v_proj", "q_proj"), chat=False)
    assert same_as(other, adapter) == ["chat: asked False, adapter True"]


def test_same_as_refuses_an_adapter_of_other_base_weights(tiny_split, tmp_path):
    """Case 3: the same model name, other weights: the adapter was trained on another base."""
    from calbench.provenance import weights_hash
    from calbench.training.cli import same_as
    from calbench.training.config import TrainConfig

    adapter = tmp_path / "a"
    _adapter_record(adapter, model=str(tiny_split))
    data = json.loads((adapter / "calbench_train.json").read_text())
    data["base_model"] = {"folder": tiny_split.name, "weights_sha256": "0" * 16}
    (adapter / "calbench_train.json").write_text(json.dumps(data))
    differ = same_as(TrainConfig(model=str(tiny_split)), adapter)
    assert differ == [
        f"base weights: {tiny_split} is {weights_hash(tiny_split)} here, the adapter was trained on {'0' * 16}"
    ]


@pytest.mark.integration
def test_new_weights_in_the_same_folder_are_evaluated_again(tmp_path, capsys):
    """Case 3: an evaluation is finished for the weights that made it, not for the folder's path:
    after the model folder is rebuilt with other weights, a rerun evaluates again and the record
    holds the new weights' numbers under the new hash."""
    from calbench.provenance import weights_hash
    from calbench.tiny import build_tiny_model

    model = tmp_path / "model"
    build_tiny_model(model, seed=0)
    rows = tmp_path / "rows"
    _write(
        rows,
        "defaults.yaml",
        "backend: calbench-hf\nmodel_args: {dtype: float32}\nchat_template: true\n"
        "evaluations:\n  quick: {tasks: [calbench_numeric_quick], samples_per_prompt: 4}\n",
    )
    row = _write(rows, "tiny.yaml", f"type: base\nmodel: {model}\n")
    store_dir, work = tmp_path / "store", tmp_path / "work"
    argv = ["leaderboard", "run", str(row), "--results-dir", str(store_dir), "--workdir", str(work)]
    assert cli.main(argv) == 0
    first = store.load_record(store_dir / "tiny.json")
    build_tiny_model(model, seed=1)
    assert weights_hash(model) != first["model"]["weights_sha256"]
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert "the model's weights changed" in capsys.readouterr().err
    second = store.load_record(store_dir / "tiny.json")
    assert second["model"]["weights_sha256"] == weights_hash(model)
    marker = json.loads((work / "tiny" / "quick" / "calbench_evaluation.json").read_text())
    assert marker["weights_sha256"] == weights_hash(model)  # the evaluation ran again, on the new weights


# ---- issue 36: records replaced only with --replace; --only; where a run writes (6, 11, 15) ----


@pytest.mark.integration
def test_a_record_is_replaced_only_by_its_own_recipe_or_with_replace(tmp_path, capsys):
    """Case 6: a copy of a row elsewhere (another recipe of the same name) replaced the published
    record; an evaluation deleted from a recipe dropped its tasks from the record silently."""
    rows, copy = tmp_path / "rows", tmp_path / "experiments"
    for folder in (rows, copy):
        _write(
            folder,
            "defaults.yaml",
            "backend: calbench-oracle\nchat_template: false\nevaluations:\n"
            "  quick: {tasks: [calbench_numeric_quick], samples_per_prompt: 50}\n",
        )
    row = _write(rows, "exact.yaml", "type: reference\n")
    other = _write(copy, "exact.yaml", "type: reference\n")
    store_dir, work = tmp_path / "store", tmp_path / "work"
    base = ["leaderboard", "run", "--results-dir", str(store_dir), "--workdir", str(work)]
    assert cli.main([*base, str(row)]) == 0
    kept = (store_dir / "exact.json").read_text()
    capsys.readouterr()
    assert cli.main([*base, str(other)]) == 2
    assert "pass --replace to replace it" in capsys.readouterr().err
    assert (store_dir / "exact.json").read_text() == kept
    assert cli.main([*base, str(other), "--replace"]) == 0
    assert f"run {other.as_posix()}" in store.load_record(store_dir / "exact.json")["command"]
    # An evaluation the recipe no longer has
    row2 = _write(
        rows,
        "two.yaml",
        "type: reference\nevaluations:\n  more: {tasks: [calbench_numeric_unseen], samples_per_prompt: 50}\n",
    )
    assert cli.main([*base, str(row2)]) == 0
    row2.write_text("type: reference\n")
    capsys.readouterr()
    assert cli.main([*base, str(row2)]) == 2
    assert "has evaluations ['more'] that" in capsys.readouterr().err


@pytest.mark.parametrize("only", [",", " ", " , "])
def test_an_only_that_names_nothing_is_refused(only, capsys):
    """Case 11: --only , and --only ' ' ran everything."""
    argv = ["leaderboard", "run", str(ROWS / "oracle.yaml"), "--only", only, "--results-dir", "/nonexistent"]
    assert cli.main(argv) == 2
    assert "names nothing" in capsys.readouterr().err


def test_an_only_naming_no_run_of_a_curve_recipe_is_refused(capsys, tmp_path):
    """Case 11: --only on a curve recipe naming no run did nothing, exit 0."""
    argv = ["leaderboard", "run", str(ROWS / "curves.yaml"), "--only", "no-such-run", "--results-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--only no-such-run: no such run (its runs: smollm2-135m-instruct-soft-paper" in err


def test_a_run_goes_to_the_repository_root_of_its_recipe(monkeypatch, tmp_path):
    """Case 15: from leaderboards/rows/ a row with a committed adapter did not find it (relative to the
    current folder) and retrained a new one; a recipe outside a repository wrote leaderboards/ here."""
    import argparse

    monkeypatch.chdir(ROWS)
    args = argparse.Namespace(recipes=[Path("oracle.yaml")], workdir=Path("w"), results_dir=None, output=None)
    cli._from_the_root(args)
    assert Path.cwd() == ROOT and args.recipes == [Path("leaderboards/rows/oracle.yaml")]
    assert args.workdir == ROWS / "w"  # a path given on the command line is kept as meant
    # the options left at their defaults are the root's: the work folder and the rendered pages
    # went to leaderboards/rows/calbench_results and leaderboards/rows/leaderboards/ (hand re-run)
    monkeypatch.chdir(ROWS)
    args = cli.build_parser().parse_args(["leaderboard", "run", "oracle.yaml", "--readme", "mine.md"])
    cli._from_the_root(args)
    assert (args.workdir, args.output, args.rows) == (
        Path("calbench_results/rows"),
        Path("leaderboards"),
        ROWS.relative_to(ROOT),
    )
    assert args.readme == ROWS / "mine.md"
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "mine", "row.yaml", "type: reference\n")
    args = argparse.Namespace(recipes=[tmp_path / "mine" / "row.yaml"], workdir=Path("w"), results_dir=None)
    from calbench.leaderboard.errors import RefusedRunError

    with pytest.raises(RefusedRunError, match="not in a repository's leaderboards/rows"):
        cli._from_the_root(args)
    assert not (tmp_path / "leaderboards").exists()


# ---- issue 49: recipes are data, checked whole before anything runs ----------------------------


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ("{effective_batch: true}", "adapter.train: effective_batch True: must be a whole number"),  # case 8
        ("{lr: true}", "adapter.train: lr True: must be a number"),
        ("{max_steps: 2.5}", "adapter.train: max_steps 2.5: must be a whole number"),
        ("{parameters: fresh, widen: 50}", "adapter.train: widen 50: the ranges widened 50x hold laws"),  # case 1
        ("{widen: 2}", "adapter.train: widen 2: widens fresh parameters' ranges"),  # a recipe's grid is not widened
        ("{target_modules: 5}", "adapter.train: target_modules 5: must be a list of module names"),
        ("{effective_batch: 30, batch_size: 8}", "effective_batch 30 is not a multiple of --batch-size 8"),
    ],
)
def test_a_rows_training_options_are_typed_and_validated_by_the_training_config_when_it_loads(tmp_path, train, message):
    """Cases 1 and 8: `effective_batch: true` and `widen: 50` passed every recipe check and failed
    only when training started, after the recipes before it in the same run had run."""
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(tmp_path, "row.yaml", f"type: fine-tuned adapter\nmodel: m\nadapter: {{path: a, train: {train}}}\n")
    with pytest.raises(RecipeError, match=re.escape(message)) as err:
        load_row(row)
    assert str(row) in str(err.value) and "\n" not in str(err.value)


def test_a_curve_runs_training_options_are_typed_when_it_loads(tmp_path):
    """Case 8: a curve's `lr: true`."""
    from calbench.leaderboard.recipes import curves

    path = _write(
        tmp_path,
        "c.yaml",
        "kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\nruns: {r: {train: {effective_batch: 2, lr: true}}}\n",
    )
    with pytest.raises(RecipeError, match=re.escape("runs.r.train: lr True: must be a number")):
        curves.load(path)
    # every later recipe of the same command is checked before the first one runs
    argv = ["leaderboard", "run", str(ROWS / "oracle.yaml"), str(path), "--results-dir", str(tmp_path / "store")]
    assert cli.main(argv) == 2 and not (tmp_path / "store").exists()


@pytest.mark.parametrize("task", ["some/dir/evil.yaml", "evil.yaml", "./evil", "~/evil", "x.YML", "a,b", "..\\evil"])
def test_a_recipes_tasks_are_names_never_files(tmp_path, task):
    """Case 2: `tasks: [some/dir/evil.yaml]` made lm-eval import the utils.py beside that YAML."""
    _write(tmp_path, "defaults.yaml", DEFAULTS)
    row = _write(tmp_path, "row.yaml", f"type: base\nmodel: m\nevaluations: {{quick: {{tasks: ['{task}']}}}}\n")
    with pytest.raises(RecipeError, match=re.escape("evaluations.quick.tasks: ")) as err:
        load_row(row)
    assert "is not a task name" in str(err.value) and "runs no code" in str(err.value)


EVIL_TASK = """\
task: evil
dataset_path: json
output_type: generate_until
doc_to_text: !function utils.doc_to_text
doc_to_target: ''
metric_list: [{metric: exact_match}]
"""


@pytest.mark.integration
def test_a_recipe_never_runs_the_python_beside_a_task_file(tmp_path, capsys, monkeypatch):
    """Case 2, run by hand: a bare task name that is a file here is read by lm-eval as a task YAML, and
    its `!function` imports the Python beside it, before the evaluation fails. Refused before any run
    (the name is in neither calbench's nor lm-eval's task index); the Python never runs."""
    marker = tmp_path / "ran"
    (tmp_path / "evil").write_text(EVIL_TASK)
    (tmp_path / "utils.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef doc_to_text(d):\n    return ''\n")
    rows = tmp_path / "rows"
    _write(rows, "defaults.yaml", REFERENCE_DEFAULTS.replace("calbench_numeric_unseen_exact", "evil"))
    row = _write(rows, "evil-row.yaml", "type: reference\n")
    monkeypatch.chdir(tmp_path)
    argv = ["leaderboard", "run", str(row), "--results-dir", str(tmp_path / "store"), "--workdir", str(tmp_path / "w")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "tasks evil: not in calbench's or lm-eval's task index" in err and "Traceback" not in err
    assert not marker.exists() and not (tmp_path / "w").exists() and not (tmp_path / "store").exists()


def _repository(root: Path, samples: int) -> Path:
    """A checkout with one reference row at leaderboards/rows/exact.yaml."""
    rows = root / "leaderboards" / "rows"
    _write(
        rows,
        "defaults.yaml",
        "backend: calbench-oracle\nchat_template: false\nevaluations:\n"
        f"  quick: {{tasks: [calbench_numeric_quick], samples_per_prompt: {samples}}}\n",
    )
    return _write(rows, "exact.yaml", "type: reference\n")


def test_a_record_in_a_shared_store_names_its_owner_and_another_repository_cannot_take_it_over(tmp_path, monkeypatch):
    """Case 5: on a shared --results-dir, another repository's recipe at the same relative path
    replaced a record without --replace (its command's relative path resolved in whichever
    repository ran)."""
    from calbench.leaderboard.errors import RefusedRunError
    from calbench.leaderboard.run.rows import check_same_recipe, owner_of

    a, b, shared = tmp_path / "a", tmp_path / "b", tmp_path / "shared"
    _repository(a, 50)
    _repository(b, 60)
    relative = Path("leaderboards/rows/exact.yaml")  # as a run names it, from its repository root
    monkeypatch.chdir(a)
    mine = load_row(relative)
    owner = owner_of(mine, shared)
    assert owner == "../a/leaderboards/rows/exact.yaml"
    record = {"command": f"calbench leaderboard run {relative}", "recipe_file": owner, "evaluations": {"quick": {}}}
    check_same_recipe(mine, record, shared)  # its own recipe: accepted
    monkeypatch.chdir(b)
    theirs = load_row(relative)
    for stored in (record, {k: v for k, v in record.items() if k != "recipe_file"}):  # new, and older than owners
        with pytest.raises(RefusedRunError, match="pass --replace to replace it"):
            check_same_recipe(theirs, stored, shared)
    # In a repository's own store the owner is a path inside it, wherever the repository is cloned
    assert owner_of(theirs, b / "leaderboards" / "results") == "../rows/exact.yaml"
    legacy = {"command": f"calbench leaderboard run {relative}", "evaluations": {"quick": {}}}
    check_same_recipe(theirs, legacy, b / "leaderboards" / "results")


@pytest.mark.integration
def test_another_repositorys_recipe_cannot_replace_a_record_in_a_shared_store(tmp_path, capsys, monkeypatch):
    """Case 5 end to end: the second repository's row (other samples per prompt) is refused, the
    record keeps the first's numbers and owner; --replace replaces it."""
    a, b, shared = _repository(tmp_path / "a", 50), _repository(tmp_path / "b", 60), tmp_path / "shared"
    monkeypatch.chdir(tmp_path)
    base = ["leaderboard", "run", "--results-dir", str(shared), "--workdir", str(tmp_path / "work")]
    assert cli.main([*base, str(a)]) == 0
    kept = (shared / "exact.json").read_text()
    assert json.loads(kept)["recipe_file"] == "../a/leaderboards/rows/exact.yaml"
    capsys.readouterr()
    assert cli.main([*base, str(b)]) == 2
    assert "pass --replace to replace it" in capsys.readouterr().err
    assert (shared / "exact.json").read_text() == kept
    assert cli.main([*base, str(b), "--replace"]) == 0
    assert json.loads((shared / "exact.json").read_text())["recipe_file"] == "../b/leaderboards/rows/exact.yaml"
