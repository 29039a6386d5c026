"""Sampling protocols: templates read back, list and answer parsing, seeds, the verbalized draw,
batch diagnostics, and both references end to end under every protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from calbench import evaluation, protocols
from calbench.families import FAMILIES, make_target, split_points
from calbench.harness import protocol_metrics
from calbench.metrics import protocol_diagnostics
from calbench.parse import classify
from tests.helpers import REFERENCES, load_task_yaml, plain_lm_eval, z_score

TASKS = [f"calbench_numeric_quick_{p}" for p in protocols.VARIANTS]
GAUSSIAN = make_target("gaussian", {"mu": 3.5, "sigma": 3})
POISSON = make_target("poisson", {"lambda": 4})


@pytest.mark.parametrize("protocol", list(protocols.PROTOCOLS))
def test_every_protocol_prompt_reads_back_its_law(protocol):
    for split in ("unseen", "heldout"):
        for target in split_points(split, "selected"):
            text = protocols.protocol_text(protocol, target)
            assert protocols.read_target(text) == target, text
            assert protocols.protocol_of(text) == protocol


def test_task_files_match_the_protocol_table():
    from calbench import tasks_path

    for protocol, p in protocols.PROTOCOLS.items():
        if protocol not in protocols.VARIANTS:  # independent: the plain tasks (tests/test_harness.py)
            continue
        for key in ("unseen", "heldout", "quick"):
            config = load_task_yaml(tasks_path() / f"calbench_numeric_{key}_{protocol}.yaml")
            assert config["generation_kwargs"]["max_gen_toks"] == p.max_gen_toks
            assert config["dataset_kwargs"]["calbench_protocol"] == protocol
            samples = 10 if key == "quick" else 1000
            assert config["repeats"] * p.items == samples


def test_the_committed_task_files_are_what_the_script_generates():
    """tasks/scripts/generate_protocol_tasks.py writes the protocol tasks from the table: run it after a change."""
    import runpy

    from calbench import tasks_path

    script = runpy.run_path(str(tasks_path() / "scripts" / "generate_protocol_tasks.py"))
    generated = script["generated"]()
    assert len(generated) == 3 * len(protocols.VARIANTS) == 12
    for name, text in generated.items():
        assert (tasks_path() / name).read_text() == text, (
            f"{name} is stale: python tasks/scripts/generate_protocol_tasks.py"
        )


def test_independent_is_the_tables_plain_prompt():
    from calbench.prompt import prompt_text

    plain = protocols.PROTOCOLS["independent"]
    assert (plain.max_gen_toks, plain.items, plain.task_suffix) == (32, 1, "")
    for target in (GAUSSIAN, POISSON):
        assert protocols.protocol_text("independent", target) == prompt_text(target)
    assert protocols.sampling_protocol("calbench_numeric_unseen") == "independent"
    assert protocols.task_protocol("calbench_numeric_unseen_full") == "independent"
    assert protocols.task_protocol("calbench_numeric_quick_ssot") == "ssot"


numbers = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: f"{x:.5f}"),
)


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(numbers, min_size=protocols.BATCH_K, max_size=protocols.BATCH_K),
    sep=st.sampled_from([", ", ",", "\n"]),
)
def test_well_formed_batch_lists_round_trip(items, sep):
    response = sep.join(items)
    assert protocols.batch_items(response) == items
    assert protocols.batch_well_formed(response)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(numbers, min_size=0, max_size=protocols.BATCH_K - 1))
def test_short_lists_are_padded_with_invalid_items(items):
    response = ", ".join(items)
    got = protocols.batch_items(response)
    assert len(got) == protocols.BATCH_K and got[len(items) :] == [""] * (protocols.BATCH_K - len(items))
    assert not protocols.batch_well_formed(response)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300))
def test_no_response_crashes_any_parser(text):
    for protocol in protocols.PROTOCOLS:
        items, extras = protocol_diagnostics.samples_of(protocol, [text], GAUSSIAN)
        assert len(items) == protocols.PROTOCOLS[protocol].items and "well_formed_rate" in extras
    assert protocols.ssot_answer(text) is not None
    listed = protocols.parse_verbalized(text, GAUSSIAN)
    if listed is not None:
        assert listed.probs.sum() == pytest.approx(1.0)
    assert isinstance(protocols.verbalized_draw(listed, text, GAUSSIAN), str)


@pytest.mark.parametrize("protocol", list(protocols.PROTOCOLS))
def test_each_row_carries_its_marker_diagnostics_and_reference_answer(protocol):
    """A protocol is one row: its marker names its turns alone, each diagnostic it names is computed
    (and no other), and the oracle's answer to its turn is well formed and yields valid samples."""
    from calbench.backends.references import OracleLM

    row = protocols.PROTOCOLS[protocol]
    text = protocols.protocol_text(protocol, GAUSSIAN, seed="AbC123")
    assert protocols.protocol_in(text) is row
    others = [p for p in protocols.PROTOCOLS.values() if p is not row and p.marker is not None]
    assert not any(p.marker in text for p in others)
    responses = [OracleLM(seed=3).respond(text) for _ in range(4)]
    items, extras = protocol_diagnostics.samples_of(protocol, responses, GAUSSIAN)
    assert set(extras) == {"well_formed_rate", *row.diagnostics}
    assert extras["well_formed_rate"][0] == 1.0
    assert len(items) == 4 * row.items and all(classify(i, GAUSSIAN).valid for i in items)
    assert set(protocol_metrics(protocol)) == {"well_formed_rate", "tokens_per_valid", *row.diagnostics}


def test_malformed_lists_are_invalid():
    assert protocols.batch_items("the numbers are 1, 2")[0] == "the numbers are 1"
    assert not protocols.batch_well_formed("1, 2, x, 4, 5, 6, 7, 8, 9, 10")
    assert not protocols.batch_well_formed(", ".join(["1"] * 11))  # more than K
    for bad in ("1: 0.5\nmaybe 2", "1: -0.2\n2: 1.2", "1: 0\n2: 0", "-1: 0.5\n2: 0.5", "1.5: 1"):
        assert protocols.parse_verbalized(bad, POISSON) is None, bad  # -1 and 1.5: outside Poisson's support


def test_ssot_takes_the_last_answer_line():
    assert protocols.ssot_answer("q8Zr2xT0\nAnswer: 4.2") == "4.2"
    assert protocols.ssot_answer("Answer: 1\nthinking...\nanswer: 7.") == "7"
    assert protocols.ssot_answer("<think>Answer: 9</think>k2\nAnswer: 3") == "3"
    assert protocols.ssot_answer("no final line 5") == ""


def test_seeds_differ_across_requests_and_repeat_across_reruns():
    seeds = [protocols.seed_string(0, "unseen/0", i) for i in range(1000)]
    assert len(set(seeds)) == 1000 and all(len(s) == protocols.SEED_LENGTH for s in seeds)
    assert seeds == [protocols.seed_string(0, "unseen/0", i) for i in range(1000)]
    assert protocols.seed_string(1, "unseen/0", 0) != seeds[0]  # another task seed, other seeds


def test_seeded_requests_carry_distinct_seeds_through_lm_eval():
    def contexts():
        out = evaluation.evaluate("calbench-oracle", ["calbench_numeric_quick_seeded"], num_samples=6, output_path=None)
        return [[a[0] for a in s["arguments"]] for s in out["samples"]["calbench_numeric_quick_seeded"]]

    first = contexts()
    assert len(first) == 42 and all(len(c) == 6 and len(set(c)) == 6 for c in first)
    assert all(protocols.SEED_SLOT not in c for doc in first for c in doc)
    assert contexts() == first  # identical across reruns


def test_verbalized_draws_follow_the_listed_probabilities():
    listing = "1: 0.2\n3: 0.5\n7: 30%"  # 0.2, 0.5, 0.3: a percentage read as one
    listed = protocols.parse_verbalized(listing, POISSON)
    assert listed is not None
    np.testing.assert_allclose(listed.probs, [0.2 / 1.0, 0.5 / 1.0, 0.3 / 1.0])
    draws = [protocols.verbalized_draw(listed, listing, POISSON, i) for i in range(3000)]
    counts = [draws.count(v) for v in ("1", "3", "7")]
    assert sum(counts) == 3000
    assert stats.chisquare(counts, [600, 1500, 900]).pvalue > 1e-3


@pytest.mark.parametrize("target", [GAUSSIAN, POISSON], ids=["gaussian", "poisson"])
def test_verbalized_w1_equals_scipy(target):
    listed = protocols.Verbalized(np.array([1.0, 3.0, 7.0]), np.array([0.2, 0.5, 0.3]))
    if target.integer:
        support = np.arange(0, 60)
        reference = stats.wasserstein_distance(listed.values, support, listed.probs, target.law.pmf(support))
    else:
        grid = target.law.ppf((np.arange(200_000) + 0.5) / 200_000)
        reference = stats.wasserstein_distance(listed.values, grid, listed.probs)
    assert protocol_diagnostics.verbalized_w1(listed, target) == pytest.approx(reference, rel=1e-3)


def test_batch_diagnostics_by_hand():
    alternating = np.array([0.1, 0.9] * 5)
    assert protocol_diagnostics.lag1_autocorrelation(alternating) == pytest.approx(
        -0.9
    )  # Σ d_i d_{i+1} / Σ d_i² = -9/10
    assert protocol_diagnostics.runs_z(alternating) > 2.5  # 10 runs where about 6 are expected
    assert protocol_diagnostics.runs_z(np.array([0.1] * 5 + [0.9] * 5)) < -2.5  # 2 runs: sticky
    assert protocol_diagnostics.duplicate_rate(np.array([1.0, 1.0, 2.0, 3.0])) == 0.25
    exact = protocol_diagnostics.exact_duplicate_rate(POISSON, 10)
    assert 0.3 < exact < 0.6  # 10 Poisson(4) draws share values often


def test_tokens_per_valid_by_hand():
    value, se = protocol_diagnostics.tokens_per_valid([10, 20, 30], [1, 1, 1])
    assert value == pytest.approx(20.0) and se == pytest.approx(np.std([10, 20, 30], ddof=1) / math.sqrt(3))
    assert protocol_diagnostics.tokens_per_valid([5, 5], [0, 0]) == [None, None]


@pytest.fixture(scope="module")
def protocol_runs(references):
    runs = {model: references("quick", model).results for model in REFERENCES}
    assert all(set(TASKS) <= set(r) for r in runs.values())  # the shared run holds every protocol's task
    return runs


@pytest.mark.integration
@pytest.mark.parametrize("task", TASKS)
def test_oracle_is_calibrated_under_every_protocol(protocol_runs, task):
    r = protocol_runs["calbench-oracle"][task]
    for family in FAMILIES:
        assert abs(z_score(r, f"excess_w1/{family}")) < 3, family
        assert r[f"valid_rate/{family},samples"] == 1.0
    assert abs(z_score(r, "excess_w1_iqr")) < 3
    assert r["well_formed_rate,samples"] == 1.0
    assert r["ks_at_n,samples"] > 0.9
    for metric in protocol_metrics(task.rsplit("_", 1)[1]):
        assert f"{metric},samples" in r and f"{metric}/gaussian,samples" in r


@pytest.mark.integration
@pytest.mark.parametrize("task", TASKS)
def test_collapsed_is_far_worse_under_every_protocol(protocol_runs, task):
    oracle, collapsed = protocol_runs["calbench-oracle"][task], protocol_runs["calbench-collapsed"][task]
    assert collapsed["pit_w1,samples"] > 5 * oracle["pit_w1,samples"]
    assert collapsed["excess_w1_iqr,samples"] > 5 * max(oracle["excess_w1_iqr,samples"], 0.01)
    assert collapsed["ks_at_n,samples"] < 0.1


@pytest.mark.integration
def test_plain_lm_eval_runs_the_protocols_on_hf(tiny_split, tmp_path):
    # The documented command, as a user types it: plain lm_eval, the hf backend, the tags.
    import json

    tasks = "calbench_protocols,calbench_protocols_quick"
    extra = ["--metadata", json.dumps({"num_samples": 2}), "--limit", "3", "--batch_size", "8"]
    done = plain_lm_eval(tiny_split, tasks, tmp_path, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = tmp_path.rglob("results_*.json")
    found = json.loads(results.read_text())["results"]
    full = [f"calbench_numeric_{split}_{p}" for split in ("unseen", "heldout") for p in protocols.VARIANTS]
    assert set(found) >= {*TASKS, *full}
    for task in (*TASKS, *full):
        assert "tokens_per_valid,samples" in found[task] and "well_formed_rate,samples" in found[task]


@pytest.mark.integration
def test_calbench_hf_serves_every_protocol(tiny_split):
    from tests.helpers import evaluate_local

    out = evaluate_local("calbench-hf", TASKS, tiny_split, num_samples=2, limit=3, apply_chat_template=True)
    for task in TASKS:
        samples = out["samples"][task]
        assert len(samples) == 3
        # batch: one request of K numbers (ceil(2 / K)); seeded: one instance per seed; the others N repeats
        protocol = task.rsplit("_", 1)[1]
        responses = 1 if protocol == "batch" else 2
        assert all(sum(len(r) for r in s["resps"]) == responses for s in samples), task
        if protocol == "seeded":
            assert all(len(s["resps"]) == 2 and len({a[0] for a in s["arguments"]}) == 2 for s in samples)
        assert "tokens_per_valid,samples" in out["results"][task]


@pytest.mark.integration
def test_protocol_table_rescores_each_run_from_its_samples(tmp_path):
    from calbench import cli
    from calbench.leaderboard.pages import protocol_page

    runs, store = tmp_path / "runs", tmp_path / "results"
    for model, name in (("calbench-oracle", "oracle"), ("calbench-collapsed", "collapsed")):
        evaluation.evaluate(model, ["calbench_numeric_quick", *TASKS], num_samples=50, output_path=runs / name)
        (results,) = (runs / name).rglob("results_*.json")
        add = ["leaderboard", "add", name, "--type", "reference", "--command", "cmd", str(results)]
        assert cli.main([*add, "--results-dir", str(store / protocol_page.FOLDER)]) == 0
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{protocol_page.README_START}\nold\n{protocol_page.README_END}\nrest\n")
    argv = ["leaderboard", "render", "--results-dir", str(store), "--output", str(tmp_path / "board")]
    assert cli.main([*argv, "--readme", str(readme)]) == 0
    table = (tmp_path / "board" / protocol_page.TABLE).read_text()
    lines = [
        line.split("|") for line in table.splitlines() if line.startswith("| oracle") or line.startswith("| collapsed")
    ]
    assert [(cells[1].strip(), cells[2].strip()) for cells in lines] == [
        (system, protocol) for system in ("collapsed", "oracle") for protocol in protocol_page.ORDER
    ]
    scores = {(c[1].strip(), c[2].strip()): float(c[5].split("±")[0]) for c in lines}
    assert all(scores[("oracle", p)] > 90 and scores[("collapsed", p)] < 1 for p in protocol_page.ORDER)
    assert (tmp_path / "board" / protocol_page.PLOT).is_file()
    block = table.split("\n\n", 1)[1].split("\n\n![", 1)[0]  # the table and its note; the page adds the plot
    assert block in readme.read_text() and readme.read_text().endswith("rest\n")


def test_every_numeric_sampling_task_keeps_its_answers_in_the_store():
    """The store keeps the valid answers of each task sampling_protocol names (the leaderboard's
    per-split scores read them): the splits, the quick selection and the range diagnostics."""
    from calbench.protocols import sampling_protocol
    from tests.test_harness import SAMPLING_TASKS

    for task in SAMPLING_TASKS:  # the full grids (hundreds of prompts) are scored, not stored
        assert (sampling_protocol(task) is None) == task.endswith("_full"), task
    for task in ("calbench_numeric_train", "calbench_numeric_interp", "calbench_numeric_wide"):
        assert sampling_protocol(task) == "independent"
    assert sampling_protocol("calbench_numeric_unseen_likelihood") is None
