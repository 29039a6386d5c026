"""The results store, the calibration score, rendering, plots, and the committed leaderboard."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from calbench import cli, evaluation, task_names
from calbench.families import FAMILIES
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages import board, export, numbers, plots
from calbench.leaderboard.pages import card as leaderboard_card
from calbench.leaderboard.records import checks, store
from calbench.lm_eval_io import load_results
from calbench.stats import Z95, Estimate

ROOT = Path(__file__).resolve().parents[1]
BOARD = ROOT / "leaderboards"
TASKS = ["calbench_numeric_unseen", "calbench_numeric_heldout"]


@pytest.fixture(scope="module")
def reference_files(references):
    """Each reference system's results files of the two splits at 100 samples per prompt."""
    out = {model: references("splits", model).files for model in ("calbench-oracle", "calbench-collapsed")}
    assert all(load_results(f[0])["results"].keys() == set(TASKS) for f in out.values())
    return out


@pytest.fixture(scope="module")
def records(reference_files):
    return [
        store.build_record("oracle", "reference", reference_files["calbench-oracle"], "calbench eval oracle"),
        store.build_record("collapsed", "reference", reference_files["calbench-collapsed"], "calbench eval c"),
    ]


def _results(**gen):
    task_gen = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
    task_gen.update(gen)
    return {
        "config": {"limit": None, "gen_kwargs": {}},
        "configs": {"t": {"output_type": "generate_until", "generation_kwargs": task_gen}},
    }


def test_pure_sampling_is_accepted():
    checks.check_run(_results())
    checks.check_run(_results(top_k=-1))  # vLLM's "no top-k"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"temperature": 0.7}, "temperature=0.7"),
        ({"do_sample": False}, "do_sample=False"),
        ({"top_p": 0.9}, "top_p=0.9"),
        ({"top_k": None}, "top_k=None"),
    ],
)
def test_non_t1_sampling_is_refused(change, message):
    with pytest.raises(RefusedRunError, match=message):
        checks.check_run(_results(**change))


def test_limit_and_cli_overrides_are_refused():
    limited = _results()
    limited["config"]["limit"] = 3
    with pytest.raises(RefusedRunError, match="--limit 3"):
        checks.check_run(limited)
    overridden = _results()
    overridden["config"]["gen_kwargs"] = "temperature=0.5"
    with pytest.raises(RefusedRunError, match=r"temperature=0\.5"):
        checks.check_run(overridden)


def test_family_score_by_hand():
    # attainable = floor + z95 se = (0.5 - 0.3) + 1.96 * 0.05 = 0.298; valid 0.8 -> 0.8 * 0.298 / 0.5
    got = numbers.family_score(Estimate(0.8, 0.04), Estimate(0.5, 0.05), Estimate(0.3, 0.05))
    s, se = got.value, got.se
    a = 0.2 + Z95 * 0.05
    assert a == pytest.approx(0.298, abs=1e-5)
    assert s == pytest.approx(0.8 * a / 0.5)
    assert se == pytest.approx(math.hypot(a / 0.5 * 0.04, 0.8 * a / 0.25 * 0.05))
    # W1 above the floor but within 1.96 standard errors: full credit
    assert numbers.family_score(Estimate(0.9, 0.01), Estimate(0.3, 0.1), Estimate(0.15, 0.1)).value == 0.9
    assert numbers.family_score(Estimate(1.0, 0.0), Estimate(0.2, 0.0), Estimate(-0.01, 0.0)).value == 1.0
    assert numbers.family_score(Estimate(0.0, 0.01), Estimate(math.nan, 0), Estimate(math.nan, 0)) == Estimate(0.0, 0.0)


def test_threshold_score_by_hand(records):
    record = copy.deepcopy(records[0])
    for split in task_names.NUMERIC_SPLITS:
        for metrics in record["tasks"][task_names.SAMPLING_TASKS[split]]["families"].values():
            metrics.update(valid_rate=[1.0, 0.0], w1=[0.5, 0.0], excess_w1=[0.0, 0.0])
    assert numbers.threshold_score(record).value == pytest.approx(100.0)
    # the six held-out families answer nothing: 24 of 30 families score 1
    for metrics in record["tasks"]["calbench_numeric_heldout"]["families"].values():
        metrics.update(valid_rate=[0.0, 0.0], w1=[None, None], excess_w1=[None, None])
    assert numbers.threshold_score(record).value == pytest.approx(100 * 24 / 30)
    del record["tasks"]["calbench_numeric_heldout"]
    assert math.isnan(numbers.threshold_score(record).value)


def test_record_contents(records):
    oracle = records[0]
    assert oracle["model"]["backend"] == "calbench-oracle"
    assert oracle["evaluations"]["run-1"]["seeds"]["random_seed"] == 0 and oracle["packages"]["lm_eval"]
    assert oracle["evaluations"]["run-1"]["task_hashes"]["calbench_numeric_unseen"]  # lm-eval's task hashes
    unseen = oracle["tasks"]["calbench_numeric_unseen"]
    assert unseen["samples_per_prompt"] == 100 and unseen["version"] == 1 and unseen["prompts"] == 24
    assert unseen["generation"]["temperature"] == 1.0
    assert set(unseen["families"]) == {f for f, fam in FAMILIES.items() if not fam.heldout}
    assert len(unseen["samples"]) == 24 and all(len(p["values"]) == 100 for p in unseen["samples"])
    cs_oracle, cs_collapsed = (numbers.threshold_score(r) for r in records)
    assert cs_oracle.value > 90
    assert cs_collapsed.value < cs_oracle.value - 20
    for record, cs in zip(records, (cs_oracle, cs_collapsed), strict=True):
        expected = _threshold_score_by_hand(record)
        assert cs.value == pytest.approx(expected.value, rel=1e-12)
        assert cs.se == pytest.approx(expected.se, rel=1e-12)
        assert cs.se > 0  # 100 samples per prompt: every valid rate and W1 has a positive standard error


def _threshold_score_by_hand(record):
    """CS and its standard error from the record's stored family pairs, by the formula in
    calbench.leaderboard.pages.numbers's docstring: s_f = v min(1, (floor + z95 se(w1)) / w1), the
    delta method per family, then 100 x the mean over the 30 families, errors in quadrature."""
    parts = []
    for family, fam in FAMILIES.items():
        task = record["tasks"][task_names.SAMPLING_TASKS["heldout" if fam.heldout else "unseen"]]
        (v, v_se), (w1, w1_se), (excess, _) = (task["families"][family][m] for m in ("valid_rate", "w1", "excess_w1"))
        if not v or w1 is None:  # no valid sample
            parts.append((0.0, 0.0))
            continue
        attainable = max(w1 - excess, 0.0) + Z95 * w1_se
        if w1 <= attainable:  # within noise of exact draws: the valid rate alone
            parts.append((v, v_se))
        else:
            parts.append((v * attainable / w1, math.hypot(attainable / w1 * v_se, v * attainable / w1**2 * w1_se)))
    return Estimate(
        100 * sum(p for p, _ in parts) / len(parts), 100 * math.sqrt(sum(se**2 for _, se in parts)) / len(parts)
    )


def test_score_is_the_n_free_score_of_the_stored_samples(records):
    from calbench.families import make_target
    from calbench.metrics import calibration

    oracle, collapsed = (numbers.Scored(r).calibration_score for r in records)
    assert oracle.value > 95 and oracle.value + Z95 * oracle.se >= 99  # about 100
    assert collapsed.value == pytest.approx(0.0, abs=1e-9)
    for record in records:
        by_family: dict = {}
        for split in task_names.NUMERIC_SPLITS:
            for p in record["tasks"][task_names.SAMPLING_TASKS[split]]["samples"]:
                params = dict(kv.split("=") for kv in p["target"].split("(")[1].rstrip(")").split(","))
                target = make_target(p["family"], {k: float(v) for k, v in params.items()})
                by_family.setdefault(p["family"], []).append(calibration.prompt_score(p["values"], p["n"], target))
        means = [sum(e.value for e in f) / len(f) for f in by_family.values()]
        assert len(means) == 30
        assert numbers.Scored(record).calibration_score.value == pytest.approx(100 * sum(means) / 30, rel=1e-12)


def test_rows_below_the_reference_size_are_marked(records):
    short = copy.deepcopy(records[0])
    for split in task_names.NUMERIC_SPLITS:
        task = short["tasks"][task_names.SAMPLING_TASKS[split]]
        task["samples_per_prompt"] = 20
        for p in task["samples"]:
            p["values"], p["n"] = p["values"][:20], 20
    assert numbers.Scored(short).calibration_score == "too few samples (20 < 50)"
    assert numbers.Scored(short).ks_at_n == "too few samples (20 < 100)"
    assert [r["name"] for r in numbers.ranked([short, records[1]])] == ["collapsed", "oracle"]  # unscored last
    few = copy.deepcopy(records[0])
    first = few["tasks"]["calbench_numeric_unseen"]["samples"][0]
    first["values"] = first["values"][:10]  # 10 valid of 100: below the 50 a chunk needs
    assert numbers.Scored(few).below_reference.value == pytest.approx(1 / 42)
    assert numbers.Scored(records[0]).below_reference.value == 0


def test_valid_rate_ks_and_pit_from_samples(records):
    oracle, collapsed = records
    assert numbers.Scored(oracle).valid_rate.value == 1.0
    assert numbers.Scored(oracle).ks_at_n.value > 0.9  # exact draws pass at p > 1e-4 (one in 10^4 fails)
    assert numbers.Scored(collapsed).ks_at_n.value < 0.1  # only the Bernoulli prompts' collapse escapes the test
    assert numbers.Scored(oracle).mean_pit_w1.value < 0.05 < 0.2 < numbers.Scored(collapsed).mean_pit_w1.value <= 0.5
    record = copy.deepcopy(oracle)
    task = record["tasks"]["calbench_numeric_heldout"]
    for p in task["samples"]:
        p["values"] = p["values"][:25]  # a quarter valid in every held-out prompt
    # 24 unseen families at 1, 6 held-out at 1/4, each family pooled over its prompts
    assert numbers.Scored(record).valid_rate.value == pytest.approx((24 + 6 * 0.25) / 30)


def test_pit_histogram_by_hand():
    hist = plots.pit_histogram([(np.array([0.0, 0.25, 1.0]), np.array([0.5, 0.25, 1.0]))], bins=2)
    # [0, 0.5] spread over the first bin, 0.25 in the first, 1.0 in the last: masses 2/3, 1/3
    np.testing.assert_allclose(hist, [2 / 3 * 2, 1 / 3 * 2])
    u = np.random.default_rng(0).random(200_000)
    np.testing.assert_allclose(plots.pit_histogram([(u, u)]), 1.0, atol=0.03)


def test_a_task_in_two_results_files_is_refused(reference_files):
    (results,) = reference_files["calbench-oracle"][:1]
    with pytest.raises(RefusedRunError, match="is in two evaluations"):
        store.build_record("x", "reference", [results, results], "cmd")


def test_limited_run_is_refused(tmp_path):
    evaluation.evaluate("calbench-oracle", ["calbench_numeric_heldout"], num_samples=5, output_path=tmp_path, limit=2)
    (results,) = tmp_path.rglob("results_*.json")
    with pytest.raises(RefusedRunError, match="--limit 2"):
        store.build_record("x", "reference", [results], "cmd")
    assert cli.main(["leaderboard", "add", "x", "--type", "reference", "--command", "c", str(results)]) == 2


def test_mixed_systems_and_bad_types_are_refused(reference_files):
    both = [reference_files["calbench-oracle"][0], reference_files["calbench-collapsed"][0]]
    with pytest.raises(RefusedRunError, match="different systems"):
        store.build_record("x", "reference", both, "cmd")
    with pytest.raises(RefusedRunError, match="entry type"):
        store.build_record("x", "model", both[:1], "cmd")


def test_render_and_store_round_trip(records, reference_files, tmp_path):
    store_dir = tmp_path / "results"
    for record in records:
        store.save_record(record, store_dir)
    assert store.load_records(store_dir) == sorted(records, key=lambda r: r["name"])
    readme = tmp_path / "top.md"
    readme.write_text("intro\n<!-- leaderboard:start -->\nold\n<!-- leaderboard:end -->\nrest\n")
    argv = [
        "leaderboard",
        "render",
        "--results-dir",
        str(store_dir),
        "--output",
        str(tmp_path),
        "--readme",
        str(readme),
    ]
    assert cli.main([*argv, "--no-plots"]) == 0
    board = (tmp_path / "README.md").read_text()
    assert re.search(r"\| 1 +\| oracle +\|", board) and re.search(r"\| 2 +\| collapsed +\|", board)  # by CS
    assert "calbench eval oracle" in board
    headline = (tmp_path / "tables" / "headline.csv").read_text().splitlines()
    assert headline[0].startswith("#,system,type,score ↑") and headline[1].startswith("1,oracle,reference,")
    assert (tmp_path / "tables" / "tiers.csv").is_file()
    top = readme.read_text()
    assert top.startswith("intro\n<!-- leaderboard:start -->\n| #") and top.endswith("<!-- leaderboard:end -->\nrest\n")


def test_splice_readme_needs_markers():
    assert board.splice_readme("a\n<!-- leaderboard:start -->\nx\n<!-- leaderboard:end -->\nb", "T") == (
        "a\n<!-- leaderboard:start -->\nT\n<!-- leaderboard:end -->\nb"
    )
    with pytest.raises(RefusedRunError, match="leaderboard:start"):
        board.splice_readme("no markers", "T")


@pytest.mark.integration
def test_plots_are_written_and_open(records, tmp_path):
    import matplotlib.image

    paths = plots.draw_all(records, tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == plots.plot_paths(records)
    assert len(paths) == 2 + len(FAMILIES)
    for path in (paths[0], paths[1], tmp_path / "plots" / "families" / "binomial.png"):
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100


@pytest.mark.slow  # re-scores every committed row from its stored samples (about two minutes)
def test_committed_leaderboard_is_reproduced_byte_for_byte(tmp_path, monkeypatch):
    """``calbench leaderboard render`` into a copy of the repository's rendered files rewrites
    each of them as it is committed: tables, the board, protocols and trade-off, adapter cards,
    the README's headline and the metric list of tasks/README.md."""
    import shutil

    from calbench.leaderboard.pages import render

    for rel in ("README.md", "tasks/README.md", "leaderboards"):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.png", "results"))
        else:
            shutil.copy(src, dst)
    monkeypatch.chdir(ROOT)  # the pages name the recipes by their paths from the repository's root
    board = Path("leaderboards")
    written = render.render_all(
        board / "results", tmp_path / "leaderboards", tmp_path / "README.md", board / "rows", draw=False, root=tmp_path
    )
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    expected = {"README.md", "tasks/README.md", "leaderboards/README.md", "leaderboards/protocols.md"}
    assert expected | {"leaderboards/tradeoff.md", "leaderboards/tables/headline.csv"} <= names
    published = {p.parent.name for p in (BOARD / "adapters").glob("*/adapter_config.json")}
    assert len(published) >= 4
    assert {n.split("/")[2] for n in names if n.startswith("leaderboards/adapters/")} == published  # every card
    for name in sorted(names):
        assert (tmp_path / name).read_text() == (ROOT / name).read_text(), (
            f"{name} is stale: calbench leaderboard render"
        )
    records = store.load_records(BOARD / "results")
    for rel in (*plots.plot_paths(records), "plots/protocol_gap.png", "plots/tradeoff.png"):
        assert (BOARD / rel).is_file(), rel


def test_adapter_card_gets_the_evaluation(records, tmp_path):
    import json

    from calbench.training import card as model_card
    from calbench.training.config import TrainConfig

    store_dir, adapter = tmp_path / "results", tmp_path / "adapter"
    for record in records:
        store.save_record(record, store_dir)
    adapter.mkdir()
    summary = {
        "config": TrainConfig(method="hard", max_steps=7).resolve().to_dict(),
        "base_model": "tiny",
        "steps": 7,
        "examples": 56,
        "final_train_loss": 1.5,
        "wall_seconds": 2.0,
        "versions": {"calbench": "0.1.0"},
    }
    (adapter / "calbench_train.json").write_text(json.dumps(summary))
    # As the trainer writes it: a card without an evaluation yet.
    config = TrainConfig(method="hard", max_steps=7).resolve()
    (adapter / "README.md").write_text(model_card.render(config, summary))
    before = (adapter / "README.md").read_text()
    argv = ["leaderboard", "card", str(adapter), "oracle", "collapsed", "--results-dir", str(store_dir)]
    assert cli.main(argv) == 0
    text = (adapter / "README.md").read_text()
    assert "# calbench hard-target LoRA adapter" in text and "stopped at 7 optimizer steps" in text
    evaluation = text.split("## Evaluation", 1)[1]
    assert re.search(r"\| oracle +\| reference +\| \d", evaluation)
    assert "- collapsed: `calbench eval c`" in evaluation
    # Only the evaluation changed, and the front matter gained the adapter's model-index: the card
    # equals a fresh render with that evaluation and that model-index.
    by_name = {r["name"]: r for r in store.load_records(store_dir)}
    table = leaderboard_card.card_evaluation([by_name["oracle"], by_name["collapsed"]])
    index = export.model_index(by_name["oracle"])
    assert text == leaderboard_card.splice_model_index(model_card.render(config, summary, table), index) != before
    assert yaml.safe_load(text.split("---\n")[1])["model-index"] == index
    assert cli.main([*argv[:3], "nobody", "--results-dir", str(store_dir)]) == 2


def test_add_takes_the_adapters_drift(reference_files, tmp_path, capsys):
    import json

    drift = tmp_path / "drift.json"
    drift.write_text(json.dumps({"model": "m", "drift": {"runs/a": {"drift_kl": 0.02, "drift_kl_se": 0.001}}}))
    store_dir = tmp_path / "results"
    common = ["--type", "reference", "--command", "c", "--results-dir", str(store_dir), "--drift", str(drift)]
    files = [str(p) for p in reference_files["calbench-oracle"]]
    assert cli.main(["leaderboard", "add", "x", *common, "--adapter", str(Path("runs/a").resolve()), *files]) == 0
    (record,) = store.load_records(store_dir)
    assert numbers.drift_metric(record) == Estimate(0.02, 0.001)
    assert cli.main(["leaderboard", "add", "y", *common, "--adapter", "runs/b", *files]) == 2
    assert "no drift for adapter runs/b" in capsys.readouterr().err


@pytest.mark.parametrize(
    "page",
    [
        "# Board\n\nhand-written\n<!-- board:start -->\nold\n<!-- board:ned -->\nmore hand-written analysis\n",
        "# Board\n\n<!-- board:strat -->\nold\n<!-- board:end -->\nanalysis\n",
        "# Board\n\n<!-- board:end -->\nold\n<!-- board:start -->\nanalysis\n",
        "<!-- board:start -->\na\n<!-- board:end -->\n<!-- board:start -->\nb\n<!-- board:end -->\n",
        "# Only hand-written text\n",
    ],
)
def test_a_page_with_a_mistyped_board_marker_is_refused_not_cut(records, tmp_path, page):
    """Issue 36, case 7: leaderboards/README.md with one marker mistyped lost every hand-written line
    after it (402 lines became 183, exit 0). Now the render is refused and the page left as it was."""

    out = tmp_path / "board"
    out.mkdir()
    (out / "README.md").write_text(page)
    with pytest.raises(RefusedRunError, match="markers"):
        board.write_all(records, out, None, draw=False)
    assert (out / "README.md").read_text() == page
    assert sorted(p.name for p in out.rglob("*")) == ["README.md"]  # nothing else written either (tables were)


@pytest.mark.parametrize(
    "readme",
    [
        "# R\n<!-- leaderboard:end -->\nold\n<!-- leaderboard:start -->\n",
        "# R\n<!-- leaderboard:start -->\na\n<!-- leaderboard:end -->\n<!-- leaderboard:start -->\nb\n<!-- leaderboard:end -->\n",
        "# R\nno block\n",
    ],
)
def test_a_readme_with_misplaced_headline_markers_is_refused_in_one_line(records, tmp_path, readme):
    """An end marker before the start one gave 'not enough values to unpack'; two blocks replaced
    the first only. Refused, naming the markers, with nothing written."""
    path = tmp_path / "README.md"
    path.write_text(readme)
    with pytest.raises(RefusedRunError, match="markers"):
        board.write_all(records, tmp_path / "board", path, draw=False)
    assert path.read_text() == readme and not (tmp_path / "board").exists()


def test_a_new_board_page_is_the_board_under_a_title():
    page = board.board_page(None, "| a |\n")
    assert page.startswith("# calbench leaderboard\n") and board.board_page(page, "| b |\n").count("| b |") == 1
