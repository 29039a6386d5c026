"""Learning curves: a curve recipe trains its runs, scores every checkpoint by one protocol and
renders the curves from the records alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calbench import cli
from calbench.leaderboard.errors import RecipeError
from calbench.leaderboard.pages import curve_page
from calbench.leaderboard.recipes import curves
from calbench.leaderboard.records import store
from calbench.leaderboard.run import curve_run
from calbench.train_record import logged_loss

ROOT = Path(__file__).resolve().parents[1]


def _recipe(folder: Path, model: str, text: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "defaults.yaml").write_text("backend: calbench-hf\nchat_template: true\ntrain: {use_cpu: true}\n")
    path = folder / "curves.yaml"
    path.write_text(
        text
        or (
            f"kind: curve\nmodel: {model}\n"
            "protocol:\n  quick: {tasks: [calbench_numeric_quick], samples_per_prompt: 2}\n"
            "runs:\n  tiny-hard:\n    label: hard\n"
            "    train: {method: hard, max_steps: 2, batch_size: 2, effective_batch: 2, prompts: 30, max_bins: 64,"
            " save_steps: 1}\n"
        )
    )
    return path


def test_the_published_curve_recipe_reads():
    spec = curves.load(ROOT / "leaderboards" / "rows" / "curves.yaml")
    assert [r.label for r in spec.runs][:2] == ["soft", "hard (same examples and steps)"]
    sampled = [r for r in spec.runs if r.train.get("soft_paths", "sample") == "sample"]
    assert len(sampled) == 3 and all(r.train["effective_batch"] == 32 and r.train["save_steps"] == 10 for r in sampled)
    (full,) = (r for r in spec.runs if r.train.get("soft_paths") == "all")
    assert full.train["max_steps"] * full.train["effective_batch"] == 128
    assert [(e.name, e.samples_per_prompt) for e in spec.protocol] == [("quick", 100), ("arithmetic", None)]


def test_every_nth_checkpoint_and_the_last_are_scored():
    found = [(s, Path(f"checkpoint-{s}")) for s in (10, 20, 30, 40, 47)]
    assert [s for s, _ in curve_run.scored(found, 2, done=True)] == [20, 40, 47]
    assert [s for s, _ in curve_run.scored(found, 2, done=False)] == [20, 40]  # 47 is not the last yet
    assert [s for s, _ in curve_run.scored(found, 1, done=False)] == [10, 20, 30, 40, 47]
    assert curves.load(ROOT / "leaderboards" / "rows" / "curves.yaml").score_every == 2
    # the base model first, unless the recipe says score_base: false
    assert curve_run.to_score(found, 2, done=True) == [(0, None), *curve_run.scored(found, 2, done=True)]
    assert curve_run.to_score(found, 2, done=True, base=False) == curve_run.scored(found, 2, done=True)


def test_a_recipe_may_leave_the_base_model_unscored(tmp_path):
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\nruns: {a: {train: {effective_batch: 2}}}\n"
    assert curves.load(_recipe(tmp_path, "m", text)).score_base
    assert not curves.load(_recipe(tmp_path, "m", text + "score_base: false\n")).score_base
    with pytest.raises(RecipeError, match="score_base"):
        curves.load(_recipe(tmp_path, "m", text + "score_base: 0\n"))


def test_a_run_may_space_its_own_points(tmp_path):
    text = (
        "kind: curve\nmodel: m\nscore_every: 2\nprotocol: {q: {tasks: [t]}}\n"
        "runs: {a: {train: {effective_batch: 2}}, b: {score_every: 6, train: {effective_batch: 2}}}\n"
    )
    loaded = curves.load(_recipe(tmp_path, "m", text))
    assert [r.score_every for r in loaded.runs] == [None, 6]
    with pytest.raises(RecipeError, match=r"runs\.b\.score_every"):
        curves.load(_recipe(tmp_path, "m", text.replace("score_every: 6", "score_every: 1.5")))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: curve\nmodel: m\nscore_every: 0\nprotocol: {q: {tasks: [t]}}\nruns: {r: {train: {effective_batch: 2}}}\n",
            "score_every",
        ),
        ("kind: row\n", "kind: must be curve"),
        ("kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\n", "runs: name at least one"),
        ("kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\nruns: {r: {train: {method: soft}}}\n", "effective_batch"),
        ("kind: curve\nprotocol: {q: {tasks: [t]}}\nruns: {r: {train: {effective_batch: 2}}}\n", "runs.r.model"),
    ],
)
def test_bad_curve_recipes_are_refused(tmp_path, text, message):
    with pytest.raises(RecipeError, match=message):
        curves.load(_recipe(tmp_path, "m", text))


@pytest.mark.integration
def test_every_checkpoint_is_scored_and_the_curve_rendered(tiny_split, tmp_path, capsys):
    path = _recipe(tmp_path / "rows", str(tiny_split))
    store_dir, work = tmp_path / "store", tmp_path / "work"
    argv = ["leaderboard", "run", str(path), "--results-dir", str(store_dir), "--workdir", str(work), "--no-render"]
    assert cli.main([*argv, "--no-train"]) == 0  # nothing trained yet: nothing to score
    assert "tiny-hard: no complete checkpoint" in capsys.readouterr().err
    assert not (store_dir / "curves" / "tiny-hard").exists()
    first = cli.main(argv)
    err = capsys.readouterr().err
    assert first == 0, err[-3000:]
    assert "tiny-hard: training: calbench train" in err and "step-0002: quick: calbench eval" in err
    folder = store_dir / "curves" / "tiny-hard"
    points = sorted(store.load_records(folder), key=lambda r: r["curve"]["step"])
    assert [p["curve"]["step"] for p in points] == [0, 1, 2]  # the base model, then each checkpoint
    assert [p["curve"]["examples"] for p in points] == [0, 2, 4]
    assert points[0]["model"]["adapter"] is None and points[2]["model"]["adapter"].endswith("checkpoint-2")
    assert points[1]["model"]["adapter_sha256"] != points[2]["model"]["adapter_sha256"]
    assert points[2]["curve"]["seconds_per_step"] > 0 and points[2]["curve"]["tokens_per_step"] > 0
    quick = points[2]["tasks"]["calbench_numeric_quick"]
    assert "samples" in quick and "families" not in quick and "overall" in quick  # a light point
    # A rerun trains and scores nothing more.
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "training" not in err and "calbench eval" not in err
    # Scored while a run still trains (no summary yet): each point's costs come from its checkpoint.
    summary = work / "tiny-hard" / "train" / "adapter" / "calbench_train.json"
    kept = summary.read_text()
    summary.unlink()
    assert cli.main([*argv, "--no-train"]) == 0
    assert "calbench eval" not in capsys.readouterr().err
    marker = json.loads((work / "tiny-hard" / "train" / "checkpoint-1" / "calbench_checkpoint.json").read_text())
    point = store.load_record(folder / "step-0001.json")["curve"]
    assert point["seconds_per_step"] == round(marker["wall_seconds"], 2) and point["examples"] == 2
    summary.write_text(kept)
    # The curve, from the records alone.
    spec = curves.with_results_dir(curves.load(path), store_dir / "curves")
    written = curve_page.write(spec, tmp_path / "out", draw_plot=True)
    page, plot = spec.page
    assert (page, plot) == ("curves.md", "plots/curves.png")  # named after the recipe
    text = (tmp_path / "out" / page).read_text()
    assert "### hard (`tiny-hard`" in text and "| step   | examples   | valid_rate" in text
    assert text.count("\n| 0 ") + text.count("\n| 1 ") + text.count("\n| 2 ") == 3
    assert (tmp_path / "out" / plot).read_bytes()[:4] == b"\x89PNG" and len(written) == 2
    numbers = curve_page.point_numbers(points[2])
    assert set(numbers) == {"valid_rate", "calibration_score", "pit_w1", "ks_at_n", "outer", "far"}
    assert json.loads((folder / "step-0002.json").read_text())["curve"]["run"] == "tiny-hard"


def _point(values: list[float]) -> dict:
    """A curve point whose quick selection holds one gaussian(mu=0, sigma=1) prompt."""
    stored = [{"family": "gaussian", "target": "gaussian(mu=0,sigma=1)", "n": 100, "values": values}]
    return {"tasks": {"calbench_numeric_quick": {"samples": stored}}, "curve": {"step": 60, "examples": 960}}


def test_the_spread_over_seeds_is_the_mean_and_sd_of_each_runs_last_point(tmp_path):
    import numpy as np
    from scipy import stats

    text = (
        "kind: curve\nmodel: m\ntitle: Seeds\nprotocol: {q: {tasks: [t]}}\nruns:\n"
        + "".join(f"  s{i}: {{group: soft, train: {{effective_batch: 2, seed: {i}}}}}\n" for i in (1, 2, 3))
        + "  other: {train: {effective_batch: 2}}\n"
    )
    spec = curves.load(_recipe(tmp_path, "m", text))
    assert spec.title == "Seeds" and [r.group for r in spec.runs] == ["soft", "soft", "soft", None]
    grid = (np.arange(100) + 0.5) / 100
    answers = {  # exact quantiles, then ever narrower answers
        f"s{i}": np.round(stats.norm.ppf(grid) * width, 4).tolist() for i, width in ((1, 1.0), (2, 0.5), (3, 0.2))
    }
    points = {name: [_point(values)] for name, values in answers.items()} | {"other": [_point(answers["s1"])]}
    page = curve_page.spread(spec, points)
    scores = [curve_page.point_numbers(points[f"s{i}"][-1])["calibration_score"].value for i in (1, 2, 3)]
    assert len(set(scores)) == 3
    rows = {line.split("|")[2].strip(): line for line in page.splitlines() if line.startswith("| soft")}
    beyond = "**seed sd beyond sampling** (3 runs)"
    assert set(rows) == {
        "s1",
        "s2",
        "s3",
        "**mean** (3 runs)",
        "**sd over runs** (3 runs)",
        beyond,
    }  # "other": no group
    headers = [h.strip() for h in page.splitlines()[2].split("|")]
    at = headers.index("calibration_score")
    assert rows["**mean** (3 runs)"].split("|")[at].strip() == f"{np.mean(scores):.3g}"
    assert rows["**sd over runs** (3 runs)"].split("|")[at].strip() == f"{np.std(scores, ddof=1):.3g}"
    ses = [curve_page.point_numbers(points[f"s{i}"][-1])["calibration_score"].se for i in (1, 2, 3)]
    by_hand = np.sqrt(max(0.0, np.var(scores, ddof=1) - np.mean(np.square(ses))))
    assert rows[beyond].split("|")[at].strip() == f"{by_hand:.3g}"

    # a seed still training: its last point is a fit point without the final's numbers
    points["s3"] = [{"tasks": {}, "curve": {"step": 40, "examples": 640}}]
    rows = {line.split("|")[2].strip(): line for line in curve_page.spread(spec, points).splitlines()[2:]}
    assert rows["s3"].split("|")[at].strip() == "n/a" and rows["s1"].split("|")[at].strip() != "n/a"
    assert rows["**mean** (3 runs)"].split("|")[at].strip() == "n/a"
    # a seed whose last point has the numbers, at another step (a fit point of a run still training)
    points["s3"] = [{**_point(answers["s3"]), "curve": {"step": 40, "examples": 640}}]
    rows = {line.split("|")[2].strip(): line for line in curve_page.spread(spec, points).splitlines()[2:]}
    assert rows["s3"].split("|")[at].strip() != "n/a"
    assert all(rows[f"**{s}** (3 runs)"].split("|")[at].strip() == "n/a" for s in ("mean", "sd over runs"))


def test_the_seed_sd_is_what_the_runs_spread_beyond_their_own_sampling_errors():
    from calbench.stats import Estimate

    # values 10, 12, 14: variance over runs 4; sampling variances 1, 1, 1 leave 3 to the seeds
    assert curve_page.seed_sd([Estimate(10, 1), Estimate(12, 1), Estimate(14, 1)]) == pytest.approx(3**0.5)
    # runs that spread less than their errors explain: no seed spread is left, not a negative variance
    assert curve_page.seed_sd([Estimate(10, 3), Estimate(11, 3), Estimate(12, 3)]) == 0.0
    # exact numbers: all the spread is the seeds'
    assert curve_page.seed_sd([Estimate(1, 0), Estimate(3, 0)]) == pytest.approx(2**0.5)


def test_a_point_names_its_checkpoint_by_the_workdir_not_the_machine(tmp_path):
    work = tmp_path / "runs"
    checkpoint = f"{work}/r/train/checkpoint-4"
    record = {
        "model": {"adapter": checkpoint},
        "recipe": {"adapter": {"path": checkpoint, "train": {}}},
        "recipe_sha256": "old",
        "evaluations": {"quick": {"command": f"calbench eval --model_args peft={checkpoint} --tasks t"}},
    }
    out = curve_run.portable(record, work)
    assert out["model"]["adapter"] == out["recipe"]["adapter"]["path"] == "<workdir>/r/train/checkpoint-4"
    assert (
        out["evaluations"]["quick"]["command"]
        == "calbench eval --model_args peft=<workdir>/r/train/checkpoint-4 --tasks t"
    )
    assert out["recipe_sha256"] == store.recipe_hash(out["recipe"]) != "old"


def test_a_points_training_loss_is_the_one_logged_last_at_or_before_it(tmp_path):
    history = [{"loss": 2.0, "step": 5}, {"loss": 1.5, "step": 10}, {"grad_norm": 1, "step": 12}]
    history += [{"loss": 1.2, "step": 15}, {"train_loss": 1.6, "step": 15}]  # the run's mean: not a logged loss
    assert logged_loss(history, 4) is None
    assert logged_loss(history, 12) == 1.5
    assert logged_loss(history, 15) == logged_loss(history, 99) == 1.2
    # The run's table gains the column when a point has it (the base model at step 0 has none).
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\nruns:\n  r: {train: {effective_batch: 2}}\n"
    spec = curves.load(_recipe(tmp_path, "m", text))
    base, trained = _point([0.0] * 100), _point([0.5] * 100)
    base["curve"] = {"step": 0, "examples": 0, "seconds_per_step": 1.0, "tokens_per_step": 9.0}
    trained["curve"] = {**base["curve"], "step": 15, "examples": 30, "train_loss": logged_loss(history, 15)}
    lines = curve_page.table(spec, {"r": [base, trained]}).splitlines()
    headers = [h.strip() for h in lines[2].split("|")]
    at = headers.index("train loss")
    assert [line.split("|")[at].strip() for line in lines[4:]] == ["n/a", "1.2"]
    # Points without losses (recorded before they were kept) leave the table as it was.
    del trained["curve"]["train_loss"]
    assert "train loss" not in curve_page.table(spec, {"r": [base, trained]})


def test_a_finished_runs_last_point_takes_the_final_protocol(tmp_path):
    """generalization.yaml scores the fit cheaply along the way and the last point on every prompt
    set: ``final:`` replaces ``protocol:`` there only, and must keep the protocol's tasks."""
    base = "kind: curve\nmodel: m\nprotocol: {fit: {tasks: [a, b], samples_per_prompt: 100}}\n"
    base += "runs: {r: {train: {effective_batch: 2}}}\n"
    spec = curves.load(_recipe(tmp_path, "m", base + "final: {all: {tasks: [a, b, c], samples_per_prompt: 200}}\n"))
    (run,) = spec.runs
    middle = curve_run.point_row(spec, run, 40, Path("checkpoint-40"))
    last = curve_run.point_row(spec, run, 47, Path("checkpoint-47"), last=True)
    assert [e.tasks for e in middle.evaluations] == [("a", "b")]
    assert [(e.tasks, e.samples_per_prompt) for e in last.evaluations] == [(("a", "b", "c"), 200)]
    with pytest.raises(RecipeError, match=r"final: .*add \['b'\]"):
        curves.load(_recipe(tmp_path, "m", base + "final: {all: {tasks: [a, c]}}\n"))
    spec = curves.load(ROOT / "leaderboards" / "rows" / "generalization.yaml")
    assert {t for e in spec.final for t in e.tasks} >= {t for e in spec.protocol for t in e.tasks}


@pytest.mark.integration
def test_a_changed_recipe_is_refused_and_a_shorter_retraining_drops_the_old_points(tiny_split, tmp_path, capsys):
    """Issue 36, cases 4 and 5: a finished run whose recipe then changes is refused (its points were
    relabelled with the new options); retrained shorter, the old run's later points are removed."""
    path = _recipe(tmp_path / "rows", str(tiny_split))
    store_dir, work = tmp_path / "store", tmp_path / "work"
    argv = ["leaderboard", "run", str(path), "--results-dir", str(store_dir), "--workdir", str(work), "--no-render"]
    assert cli.main(argv) == 0
    folder = store_dir / "curves" / "tiny-hard"
    assert sorted(p.name for p in folder.glob("step-*.json")) == ["step-0000.json", "step-0001.json", "step-0002.json"]
    path.write_text(path.read_text().replace("max_steps: 2", "max_steps: 1"))
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "trained with other options than the recipe's" in err and "max_steps: asked 1, adapter 2" in err
    import shutil

    shutil.rmtree(work / "tiny-hard" / "train")  # the user's way to retrain it
    assert cli.main(argv) == 0
    assert sorted(p.name for p in folder.glob("step-*.json")) == ["step-0000.json", "step-0001.json"]
    assert not (folder / "samples" / "step-0002.json").exists()


def test_a_work_folder_named_like_part_of_a_word_is_replaced_only_as_a_path():
    """Issue 36, case 13: with --workdir c the stored commands read '<workdir>alben<workdir>h eval'."""
    record = {
        "model": {"adapter": "c/r/train/checkpoint-4"},
        "recipe": None,
        "evaluations": {
            "q": {"command": "calbench eval --model_args pretrained=cc,peft=c/r/train/checkpoint-4 --output_path c"}
        },
    }
    out = curve_run.portable(record, Path("c"))
    assert out["model"]["adapter"] == "<workdir>/r/train/checkpoint-4"
    assert out["evaluations"]["q"]["command"] == (
        "calbench eval --model_args pretrained=cc,peft=<workdir>/r/train/checkpoint-4 --output_path <workdir>"
    )


def test_a_full_fine_tunes_checkpoint_is_the_points_model(tmp_path):
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\n"
    text += "runs: {lora: {train: {effective_batch: 2}}, full: {train: {effective_batch: 2, finetune: full}}}\n"
    spec = curves.load(_recipe(tmp_path, "m", text))
    lora, full = spec.runs
    point = curve_run.point_row(spec, lora, 4, Path("w/lora/train/checkpoint-4"))
    assert (point.model, point.adapter, point.type) == ("m", "w/lora/train/checkpoint-4", "fine-tuned adapter")
    point = curve_run.point_row(spec, full, 4, Path("w/full/train/checkpoint-4"))
    assert (point.model, point.adapter, point.type) == ("w/full/train/checkpoint-4", None, "fine-tuned")
    assert curve_run.point_row(spec, full, 0, None).model == "m"  # the base model at step 0


@pytest.mark.parametrize("workdir", ["calbench", "eval", "calbench_numeric_quick", "calbench-hf"])
def test_a_work_folder_named_like_a_word_of_the_command_replaces_only_paths_under_it(workdir):
    """Issue 49, case 7: `--workdir calbench` stored '<workdir> eval ...'; `eval` or a task name the same."""
    checkpoint = f"{workdir}/r/train/checkpoint-4"
    command = (
        f"calbench eval --model calbench-hf --model_args pretrained=/m,peft={checkpoint} "
        "--tasks calbench_numeric_quick --output_path <workdir>/step-0004/quick"
    )
    record = {"model": {"adapter": checkpoint}, "recipe": None, "evaluations": {"q": {"command": command}}}
    out = curve_run.portable(record, Path(workdir), "r")
    assert out["evaluations"]["q"]["command"] == command.replace(
        f"peft={checkpoint}", "peft=<workdir>/r/train/checkpoint-4"
    )
    assert out["model"]["adapter"] == "<workdir>/r/train/checkpoint-4"


def test_a_model_inside_an_absolute_work_folder_keeps_its_path():
    """Issue 49, case 7: `--workdir /data` with the model in /data/models rewrote pretrained= too."""
    command = "calbench eval --model_args pretrained=/data/models/m,peft=/data/r/train/checkpoint-4 --tasks t"
    record = {
        "model": {"adapter": "/data/r/train/checkpoint-4"},
        "recipe": {"model": "/data/models/m", "adapter": {"path": "/data/r/train/checkpoint-4", "train": {}}},
        "recipe_sha256": "old",
        "evaluations": {"q": {"command": command}},
    }
    out = curve_run.portable(record, Path("/data"), "r")
    assert out["evaluations"]["q"]["command"] == (
        "calbench eval --model_args pretrained=/data/models/m,peft=<workdir>/r/train/checkpoint-4 --tasks t"
    )
    assert (
        out["recipe"]["model"] == "/data/models/m"
        and out["recipe"]["adapter"]["path"] == "<workdir>/r/train/checkpoint-4"
    )
    # a full fine-tune's checkpoint is the point's model: under the run's folder, it is replaced
    full = {"model": {}, "recipe": {"model": "/data/r/train/checkpoint-4"}, "recipe_sha256": "", "evaluations": {}}
    assert curve_run.portable(full, Path("/data"), "r")["recipe"]["model"] == "<workdir>/r/train/checkpoint-4"
