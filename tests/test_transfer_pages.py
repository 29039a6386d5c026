"""The transfer diagnostics on the leaderboard: the name-versus-law pairs are exact identities, the
diagnostics' scores on curve pages, the checkpoint chosen on the validation families, WiSE-FT
runs in curve recipes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from calbench.leaderboard.errors import RecipeError, RefusedRunError
from calbench.leaderboard.pages import curve_page
from calbench.leaderboard.recipes import curves
from calbench.leaderboard.run import curve_run
from calbench.name_pairs import NO_IDENTITY, pairs
from calbench.space import canonical_space
from tests.test_leaderboard_curves import _recipe


@pytest.mark.parametrize(("heldout", "training"), pairs(), ids=lambda t: t.key)
def test_each_name_pair_is_one_law_on_the_answer_space(heldout, training):
    assert heldout.family.heldout and not training.family.heldout
    for bins in (1001, 16384):
        a, b = canonical_space(heldout, 5, bins), canonical_space(training, 5, bins)
        assert a.strings == b.strings
        assert np.allclose(a.masses, b.masses, atol=1e-12)
        assert np.allclose(heldout.law.cdf(a.values), training.law.cdf(a.values), atol=1e-12)


def test_every_held_out_family_has_a_pair_or_a_reason():
    from calbench.families import FAMILIES

    paired = {a.family.name for a, _ in pairs()}
    heldout = {n for n, f in FAMILIES.items() if f.heldout}
    assert paired | set(NO_IDENTITY) == heldout and not paired & set(NO_IDENTITY)


def _samples(target_key: str, values: list[float], family: str) -> dict:
    return {"family": family, "target": target_key, "n": len(values), "values": values}


def _validation_point(step: int, width: float) -> dict:
    """A curve point whose validation task holds one half_cauchy prompt, answered with its exact
    quantiles squeezed by ``width`` (1: exact)."""
    grid = (np.arange(100) + 0.5) / 100
    values = np.round(stats.halfcauchy(scale=1.058).ppf(grid) * width, 4)
    values = np.random.default_rng(0).permutation(values).tolist()  # answers come in no order
    task = {"samples": [_samples("half_cauchy(scale=1.058)", values, "half_cauchy")], "samples_per_prompt": 100}
    return {"tasks": {"calbench_numeric_validation": task}, "curve": {"step": step, "examples": step * 32}}


def test_the_checkpoint_chosen_is_the_best_on_the_validation_families(tmp_path, monkeypatch):
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [calbench_numeric_validation]}}\n"
    text += "runs: {r: {train: {effective_batch: 2, finetune: full}}}\n"
    spec = curves.with_results_dir(curves.load(_recipe(tmp_path, "m", text)), tmp_path / "store")
    points = [_validation_point(40, 0.2), _validation_point(80, 1.0), _validation_point(120, 0.5)]
    scores = curve_run.split_scores(points, "validation")
    assert max(scores, key=lambda s: scores[s].value) == 80
    page = curve_page.chosen(spec, {"r": points})
    row = next(line for line in page.splitlines() if line.startswith("| r "))
    assert row.split("|")[2].strip() == "80" and row.split("|")[5].strip() == "120"
    # choose copies that checkpoint's weights out of the run folder, with the reason
    folder = spec.folder("r")
    folder.mkdir(parents=True)
    for point in points:
        (folder / f"step-{point['curve']['step']:04d}.json").write_text(json.dumps(point))
    monkeypatch.setattr(curve_run.store, "load_record", lambda p: json.loads(Path(p).read_text()))
    for step in (40, 80, 120):
        checkpoint = tmp_path / "w" / "r" / "train" / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_text(f"weights {step}")
        (checkpoint / "calbench_checkpoint.json").write_text("{}")
        (checkpoint / "optimizer.pt").write_text("not copied")
    out = curve_run.choose(spec, "r", tmp_path / "w")
    assert (out / "model.safetensors").read_text() == "weights 80" and not (out / "optimizer.pt").exists()
    assert json.loads((out / curve_run.CHOICE).read_text())["step"] == 80
    with pytest.raises(RefusedRunError, match="no run named"):
        curve_run.choose(spec, "nope", tmp_path / "w")


def test_a_page_shows_the_name_pairs_side_by_side_and_the_training_distribution(tmp_path):
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [calbench_numeric_names]}}\n"
    text += "runs: {r: {label: R, train: {effective_batch: 2}}}\n"
    spec = curves.load(_recipe(tmp_path, "m", text))
    grid = (np.arange(100) + 0.5) / 100
    shuffle = np.random.default_rng(0).permutation
    exact = {  # the training names answered exactly, the held-out names collapsed on their medians
        b.key: _samples(b.key, shuffle(b.law.ppf(grid)).tolist(), b.family.name) for _, b in pairs()
    }
    collapsed = {a.key: _samples(a.key, [float(a.law.median())] * 100, a.family.name) for a, _ in pairs()}
    task = {"samples": [*collapsed.values(), *exact.values()], "samples_per_prompt": 100}
    point = {"tasks": {"calbench_numeric_names": task}, "curve": {"step": 10, "examples": 20}}
    point["curve"]["distribution"] = {"uniform": 5, "gaussian": 3, "zipf": 2}
    page = curve_page.names(spec, {"r": [point]})
    other = curves.load(_recipe(tmp_path, "m", text.replace("calbench_numeric_names", "calbench_numeric_train")))
    assert curve_page.names(other, {"r": [point]}) == ""  # a recipe that does not score the pairs: no section
    row = next(line for line in page.splitlines() if line.startswith("| R "))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert len(cells) == len(pairs()) and all(int(c.split(" / ")[0]) > 80 for c in cells)
    assert all(int(c.split(" / ")[1]) < 20 for c in cells)
    numbers = curve_page.point_numbers(point)
    assert numbers["training names score"].value > 80 > 20 > numbers["held-out names score"].value
    listed = curve_page.distributions(spec, {"r": [point]})
    assert "3 families, 10 examples" in listed and "1 extra families 2: zipf 2" in listed


def test_the_held_out_families_are_shown_one_by_one_with_their_share_of_valid_answers(tmp_path):
    """A family answered with exact draws scores high with every answer valid; one whose answers
    are mostly impossible (only 5 of 100 valid) scores low and says so; a reference is a row too,
    and a recipe that does not score the held-out split has no such section."""
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [calbench_numeric_heldout]}}\n"
    text += "runs: {r: {label: R, train: {effective_batch: 2}}}\n"
    spec = curves.load(_recipe(tmp_path, "m", text))
    grid = (np.arange(100) + 0.5) / 100
    targets = {a.family.name: a for a, _ in pairs()}
    bernoulli, chi = targets["bernoulli"], targets["chi"]
    exact = np.random.default_rng(0).permutation(bernoulli.law.ppf(grid)).tolist()
    impossible = {**_samples(chi.key, chi.law.ppf(grid[::20]).tolist(), "chi"), "n": 100}  # 95 answers invalid
    task = {"samples": [_samples(bernoulli.key, exact, "bernoulli"), impossible], "samples_per_prompt": 100}
    point = {"tasks": {"calbench_numeric_heldout": task}, "curve": {"step": 10, "examples": 20}}
    reference = {"name": "ref", "type": "reference", "tasks": {"calbench_numeric_heldout": task}}
    page = curve_page.heldout_families(spec, {"r": [point]}, [reference])
    header, _, *lines = [line for line in page.splitlines() if line.startswith("|")]
    assert [h.strip() for h in header.split("|")[1:-1]] == ["system", "bernoulli", "chi"]
    rows = {c[0]: c[1:] for c in ([x.strip() for x in line.split("|")[1:-1]] for line in lines)}
    assert set(rows) == {"R", "ref (reference)"} and rows["R"] == rows["ref (reference)"]
    (bernoulli_cell, chi_cell) = rows["R"]
    assert bernoulli_cell.endswith("(valid 100%)") and float(bernoulli_cell.split()[0]) > 80
    assert chi_cell.endswith("(valid 5%)") and float(chi_cell.split()[0]) < 20
    other = curves.load(_recipe(tmp_path, "m", text.replace("calbench_numeric_heldout", "calbench_numeric_train")))
    assert curve_page.heldout_families(other, {"r": [point]}) == ""


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{run: nope, alpha: 0.5}", "must name an earlier run"),
        ("{run: lora, alpha: 0.5}", "must be a full fine-tuning run"),
        ("{run: full, alpha: 1.5}", "must be a number in \\[0, 1\\]"),
        ("{run: full}", "needs run: and alpha: only"),
    ],
)
def test_bad_interpolated_runs_are_refused(tmp_path, spec, message):
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\nruns:\n"
    text += "  lora: {train: {effective_batch: 2}}\n  full: {train: {effective_batch: 2, finetune: full}}\n"
    text += f"  wise: {{interpolate: {spec}}}\n"
    with pytest.raises(RecipeError, match=message):
        curves.load(_recipe(tmp_path, "m", text))


def test_an_interpolated_run_takes_its_sources_options_and_model(tmp_path):
    text = "kind: curve\nmodel: m\nprotocol: {q: {tasks: [t]}}\nruns:\n"
    text += "  full: {train: {effective_batch: 2, finetune: full}}\n  wise: {interpolate: {run: full, alpha: 0.5}}\n"
    full, wise = curves.load(_recipe(tmp_path, "m", text)).runs
    assert wise.interpolate == ("full", 0.5) and wise.train == full.train and wise.model == "m"


def test_the_end_of_training_table_leads_with_the_headline_score_of_each_run_and_reference():
    """The score a row would rank by (the calibration score on the unseen and held-out prompts,
    sample-size-free) is on the transfer page beside each run's prompt sets, so a curve arm and a
    leaderboard row compare on one number."""
    from calbench.leaderboard.pages.numbers import Scored
    from calbench.leaderboard.records import store
    from calbench.stats import fmt

    root = Path(__file__).resolve().parents[1]
    spec = curves.with_results_dir(
        curves.load(root / "leaderboards" / "rows" / "transfer.yaml"), root / "leaderboards" / "results" / "transfer"
    )
    points = curve_page.load_points(spec)
    lookup = store.load_record(root / "leaderboards" / "results" / "lookup.json")
    page = curve_page.ends(spec, points, [lookup])
    header, _, *lines = [line for line in page.splitlines() if line.startswith("|")]
    cells = {c[0]: c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in lines)}
    column = [h.strip() for h in header.split("|")[1:-1]].index(curve_page.HEADLINE_SCORE)
    run = spec.runs[0]
    assert cells[run.label][column] == fmt(Scored(points[run.name][-1]).calibration_score) == "44.7 ± 2"
    assert cells["lookup (reference)"][column] == "40.2 ± 0.81"  # the leaderboard's headline cell


def test_the_end_of_training_table_shows_the_retention_the_protocol_scores_beside_the_base_model():
    """transfer.yaml scores every arm's last step on the offline arithmetic task: the end-of-training
    table carries it for each run and for the base model (the render puts the record of the
    model the runs train beside the references), so "within the base model's interval" is read
    off one table; a reference that never ran the task shows n/a."""
    from calbench.leaderboard.pages.numbers import task_metric
    from calbench.leaderboard.records import store
    from calbench.stats import fmt

    root = Path(__file__).resolve().parents[1]
    results = root / "leaderboards" / "results"
    spec = curves.with_results_dir(curves.load(root / "leaderboards" / "rows" / "transfer.yaml"), results / "transfer")
    points = curve_page.load_points(spec)
    base = store.load_record(results / "smollm2-135m-instruct-base.json")
    lookup = store.load_record(results / "lookup.json")
    page = curve_page.ends(spec, points, [lookup, base])
    header, _, *lines = [line for line in page.splitlines() if line.startswith("|")]
    cells = {c[0]: c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in lines)}
    column = [h.strip() for h in header.split("|")[1:-1]].index("arithmetic exact_flexible")
    run = spec.runs[0]
    tuned = task_metric(points[run.name][-1], "calbench_arithmetic", "exact_flexible")
    assert cells[run.label][column] == fmt(tuned) == "0.005 ± 0.017"
    assert cells["smollm2-135m-instruct-base (the base model)"][column] == "0.15 ± 0.05"
    assert cells["lookup (reference)"][column] == "n/a"
    # a protocol without the task has no such column
    generalization = curves.with_results_dir(
        curves.load(root / "leaderboards" / "rows" / "generalization.yaml"), results / "generalization"
    )
    other = curve_page.ends(generalization, curve_page.load_points(generalization), [base])
    assert "arithmetic" not in other.splitlines()[2]
