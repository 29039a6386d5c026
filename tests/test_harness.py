"""lm-eval integration: indexing, task configs, runs on tiny models and on the reference systems."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import calbench
from calbench import evaluation
from calbench.families import FAMILIES
from calbench.protocols import PROTOCOLS
from tests.helpers import REFERENCES, evaluate_local, integration_except, load_task_yaml, valid_rates, z_score

TASK_FILES = sorted(p for p in calbench.tasks_path().glob("*.yaml") if not p.name.startswith("_"))
TASKS = [p.stem for p in TASK_FILES]
NUMERIC_TASKS = [t for t in TASKS if t.startswith("calbench_numeric")]
# transfer tasks: test_transfer.py; the sample-free tasks: test_enumeration.py
SAMPLING_TASKS = [t for t in NUMERIC_TASKS if not t.endswith(("_likelihood", "_exact"))]
# The fast tier runs the quick task end to end; the integration tier runs every task.
SAMPLING_RUNS = integration_except("calbench_numeric_quick", SAMPLING_TASKS)
# The independent protocol's tasks (the protocol tasks' responses are lists, strings with an
# Answer: line, ...: tests/test_protocols.py runs them on the tiny model).
INDEPENDENT_TASKS = [t for t in SAMPLING_TASKS if not t.endswith(tuple(f"_{p}" for p in PROTOCOLS))]
INDEPENDENT_RUNS = integration_except("calbench_numeric_quick", INDEPENDENT_TASKS)


def _context(sample):
    """The prompt a logged sample was conditioned on (lm-eval's in-memory or saved form)."""
    args = sample["arguments"]
    return args["gen_args_0"]["arg_0"] if isinstance(args, dict) else args[0][0]


def test_task_files_are_flat_and_tagged():
    assert TASKS == [
        "calbench_arithmetic",
        "calbench_format_following",
        "calbench_mcq_balance",
        "calbench_mmlu_mini",
        "calbench_noveltybench_curated",
        "calbench_noveltybench_wildchat",
        "calbench_numeric_heldout",
        "calbench_numeric_heldout_batch",
        "calbench_numeric_heldout_exact",
        "calbench_numeric_heldout_full",
        "calbench_numeric_heldout_likelihood",
        "calbench_numeric_heldout_seeded",
        "calbench_numeric_heldout_ssot",
        "calbench_numeric_heldout_verbalized",
        "calbench_numeric_interp",
        "calbench_numeric_names",
        "calbench_numeric_quick",
        "calbench_numeric_quick_batch",
        "calbench_numeric_quick_seeded",
        "calbench_numeric_quick_ssot",
        "calbench_numeric_quick_verbalized",
        "calbench_numeric_train",
        "calbench_numeric_unseen",
        "calbench_numeric_unseen_batch",
        "calbench_numeric_unseen_exact",
        "calbench_numeric_unseen_full",
        "calbench_numeric_unseen_likelihood",
        "calbench_numeric_unseen_seeded",
        "calbench_numeric_unseen_ssot",
        "calbench_numeric_unseen_verbalized",
        "calbench_numeric_validation",
        "calbench_numeric_wide",
        "calbench_open_ended",
        "calbench_retention",
    ]
    for path in calbench.tasks_path().glob("*.yaml"):
        cfg = load_task_yaml(path)
        if path.name.startswith("_"):
            assert "include" not in cfg, f"{path.name}: templates must not include further (one level only)"
            continue
        if "group" in cfg:  # calbench_retention: a group of lm-eval's own tasks
            assert cfg["group"] == path.stem and all(isinstance(t, str) for t in cfg["task"])
            continue
        assert cfg["task"] == path.stem and cfg["task"].startswith("calbench_")
        tags = [cfg["tag"]] if isinstance(cfg["tag"], str) else cfg["tag"]
        # The sample-free tasks need calbench-hf: outside the `calbench` tag, which runs anywhere.
        # The training prompts are a diagnostic for calbench's own adapters: outside it too.
        if path.stem.endswith("_exact"):
            assert tags == ["calbench_exact"]
        else:
            diagnostic = path.stem in (
                *("calbench_numeric_train", "calbench_numeric_interp", "calbench_numeric_wide"),
                *("calbench_numeric_validation", "calbench_numeric_names"),
            )
            assert tags == ["calbench_diagnostics"] if diagnostic else "calbench" in tags
        assert isinstance(cfg["metadata"]["version"], int)
        functions = [v for v in _walk(cfg) if isinstance(v, str) and v.startswith("!function")]
        assert all(f.split()[1].startswith("calbench.") for f in functions)


def _walk(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)
    else:
        yield obj


@pytest.mark.integration
def test_lm_eval_indexes_every_task():
    # lm-eval skips a YAML it cannot parse with only a DEBUG log: check each one is there,
    # alongside lm-eval's own tasks (the index a plain `lm_eval --include_path` builds).
    tm = evaluation.task_manager(include_defaults=True)
    assert set(TASKS) <= set(tm.all_tasks)
    assert "tinyMMLU" in tm.all_tasks
    assert set(tm.match_tasks(["calbench"])) >= {"calbench"}


def test_every_task_loads():
    # The likelihood tasks read the model's terminator from --model_args or --metadata.
    loaded = evaluation.task_manager({"calbench_terminator": "<e>"}, include_defaults=False).load(NUMERIC_TASKS)
    tasks = loaded["tasks"]  # name -> Task
    expected_docs = {
        "calbench_numeric_unseen": 24,
        "calbench_numeric_heldout": 18,
        "calbench_numeric_unseen_full": 591,
        "calbench_numeric_heldout_full": 92,
        "calbench_numeric_quick": 42,
        "calbench_numeric_train": 24,
        "calbench_numeric_interp": 72,
        "calbench_numeric_wide": 72,
        "calbench_numeric_unseen_likelihood": 24,
        "calbench_numeric_heldout_likelihood": 18,
        "calbench_numeric_unseen_exact": 24,
        "calbench_numeric_heldout_exact": 18,
    }
    for name, n in expected_docs.items():
        if name.endswith("_exact"):
            assert len(tasks[name].eval_docs) == n and tasks[name].config.repeats == 1
            continue
        if name.endswith("_likelihood"):
            assert len(tasks[name].eval_docs) == n
            assert tasks[name].config.output_type == "multiple_choice"
            continue
        task = tasks[name]
        assert len(task.eval_docs) == n
        gen = task.config.generation_kwargs
        assert gen["do_sample"] is True and gen["temperature"] == 1.0 and gen["top_p"] == 1.0 and gen["top_k"] == 0
        assert "seed" not in gen  # a per-request seed would make vLLM's repeats identical
        assert task.config.repeats == (10 if name == "calbench_numeric_quick" else 1000)


@pytest.mark.parametrize("task", INDEPENDENT_RUNS)
def test_task_runs_on_tiny_model(task, tiny_split, tmp_path):
    results = evaluate_local(
        "hf", [task], tiny_split, num_samples=2, apply_chat_template=True, output_path=tmp_path, limit=3, batch_size=16
    )
    r = results["results"][task]
    samples = results["samples"][task]
    # The valid rate is what the parser makes of the logged responses, with calbench's own
    # standard error (Agresti-Coull per prompt, in quadrature over prompts and families).
    overall, families = valid_rates(samples)
    assert r["valid_rate,samples"] == pytest.approx(overall.value, abs=1e-12)
    assert r["valid_rate_stderr,samples"] == pytest.approx(overall.se, rel=1e-12) and overall.se > 0
    for family, rate in families.items():
        assert r[f"valid_rate/{family},samples"] == pytest.approx(rate.value, abs=1e-12), family
        assert r[f"valid_rate/{family}_stderr,samples"] == pytest.approx(rate.se, rel=1e-12), family
    assert len(samples) == 3
    assert all(len(s["resps"][0]) == 2 for s in samples)  # every repeat kept
    assert _context(samples[0]).startswith("<|im_start|>user\nGenerate exactly ONE")
    assert list(tmp_path.rglob("results_*.json")) and list(tmp_path.rglob(f"samples_{task}_*.jsonl"))


def test_base_model_without_template(tiny_merge, tmp_path):
    results = evaluate_local("hf", ["calbench_numeric_quick"], tiny_merge, num_samples=3, limit=2, batch_size=8)
    sample = results["samples"]["calbench_numeric_quick"][0]
    assert _context(sample).startswith("Generate exactly ONE random number")
    assert len(sample["resps"][0]) == 3


# One task of each kind: sampling, a protocol, likelihood (context, continuation), retention.
CONTEXT_TASKS = [
    "calbench_numeric_quick",
    "calbench_numeric_quick_ssot",
    "calbench_numeric_heldout_likelihood",
    "calbench_arithmetic",
]


@pytest.mark.parametrize("model", ["tiny_merge", "tiny_split"])
def test_every_task_conditions_on_the_prompt_training_renders(model, request):
    # The training add-on conditions a model on calbench.prompt.render's string: the chat
    # template's, or for a base model the prompt and a newline. lm-eval must send the same,
    # or a base model's adapter answers from a context it never saw (a Gemma-3-270M adapter
    # wrote 27641 for 2.7641 after the bare prompt).
    from calbench.prompt import render
    from tests.helpers import load_tokenizer

    path = request.getfixturevalue(model)
    chat = model == "tiny_split"
    tok = load_tokenizer(path)
    results = evaluate_local("hf", CONTEXT_TASKS, path, apply_chat_template=chat, num_samples=2, limit=1, batch_size=8)
    for task in CONTEXT_TASKS:
        for sample in results["samples"][task]:
            expected = render(tok, sample["doc"]["prompt"])
            assert expected.endswith("\n") and (chat or expected == sample["doc"]["prompt"] + "\n")
            assert _context(sample) == expected, task


@pytest.mark.parametrize("task", SAMPLING_RUNS)
def test_task_runs_on_oracle(task):
    results = evaluation.evaluate("calbench-oracle", [task], num_samples=5, output_path=None)
    r = results["results"][task]
    assert r["valid_rate,samples"] == 1.0
    assert r["support_violation_rate,samples"] == 0.0


@pytest.fixture(scope="module")
def reference_runs(references):
    return {model: references("quick", model).results["calbench_numeric_quick"] for model in REFERENCES}


@pytest.mark.integration
def test_oracle_is_calibrated_end_to_end(reference_runs):
    # Prompts rendered, read back, answered, parsed and scored: an exact sampler's excess
    # W1 is zero up to noise on every family. The standard errors are conservative
    # (tests/test_sampling.py), so |z| > 3 on any of 30 families would be a real error.
    r = reference_runs["calbench-oracle"]
    for family in FAMILIES:
        assert abs(z_score(r, f"excess_w1/{family}")) < 3, family
        assert r[f"valid_rate/{family},samples"] == 1.0
    assert abs(z_score(r, "excess_w1_iqr")) < 3
    assert r["gof_pass_rate,samples"] >= 0.8


@pytest.mark.integration
def test_collapsed_sampler_is_far_worse(reference_runs):
    oracle, collapsed = reference_runs["calbench-oracle"], reference_runs["calbench-collapsed"]
    for family in FAMILIES:
        # Cauchy's W1 is ruled by its tails: at 200 samples an exact sampler's W1 spreads
        # as widely as the collapsed sampler's excess, so only its sign can be asserted.
        if family == "cauchy":
            assert collapsed["excess_w1/cauchy,samples"] > 0
        else:
            assert z_score(collapsed, f"excess_w1/{family}") > 3, family
    assert collapsed["excess_w1_iqr,samples"] > 5 * max(oracle["excess_w1_iqr,samples"], 0.01)
    assert collapsed["gof_pass_rate,samples"] < 0.1


def test_num_samples_metadata_validated():
    from calbench.evaluation import task_manager

    with pytest.raises(ValueError, match="num_samples"):
        task_manager({"num_samples": 0}, include_defaults=False).load(["calbench_numeric_quick"])


def test_doc_fields_are_strings():
    from calbench.harness import numeric_docs

    doc = numeric_docs(calbench_split="heldout", calbench_points="selected", pretrained="ignored")["test"][0]
    assert doc["family"] == "bernoulli" and doc["params"] == '{"p": 0.1}' and doc["target"] == "bernoulli(p=0.1)"
    with pytest.raises(ValueError, match="calbench_split"):
        numeric_docs(calbench_split="training")


def test_the_training_probe_is_one_training_prompt_per_training_family():
    from calbench.families import split_points
    from calbench.harness import numeric_docs

    docs = numeric_docs(calbench_split="train", calbench_points="selected")["test"]
    trained = {t.key for t in split_points("train")}
    evaluated = {t.key for s in ("unseen", "heldout") for t in split_points(s)}
    assert len(docs) == 24 and len(set(docs["family"])) == 24  # one per training family
    assert set(docs["target"]) <= trained and not set(docs["target"]) & evaluated
    assert set(docs["family"]) == {t.family.name for t in split_points("unseen", "selected")}
    assert all(d["id"] == f"train/{i}" and d["split"] == "train" for i, d in enumerate(docs))
    assert len(numeric_docs(calbench_split="train", calbench_points="full")["test"]) == len(trained) == 1988


@pytest.mark.integration
def test_results_are_json_numbers(reference_runs):
    r = reference_runs["calbench-collapsed"]
    for key, value in r.items():
        # lm-eval adds "<metric>_stderr_stderr": "N/A" for calbench's own stderr entries.
        if key.endswith(",samples") and "_stderr_stderr" not in key:
            assert isinstance(value, float), key
            assert math.isfinite(value) or "/" in key, key


def test_tasks_path_from_clone():
    assert (calbench.tasks_path() / "calbench_numeric_unseen.yaml").is_file()
    assert calbench.tasks_path() == Path(calbench.__file__).resolve().parent.parent / "tasks"
