"""calbench's policies are defined once and every user reads the same definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from calbench import policy
from calbench.backends.hf import _sampler_temperature
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.records.checks import check_run
from calbench.policy import GREEDY_TASKS, PURE_SAMPLING, decoding_deviations, greedy_deviations, sampling_deviations

FIXTURES = Path(__file__).parent / "fixtures"


def test_pure_sampling_and_its_deviations():
    assert sampling_deviations(PURE_SAMPLING) == []
    assert sampling_deviations({**PURE_SAMPLING, "top_k": -1}) == []  # vLLM's "no top-k"
    assert sampling_deviations({**PURE_SAMPLING, "temperature": 0.5}) == ["temperature=0.5"]
    assert sampling_deviations({**PURE_SAMPLING, "temperature": 0.5}, any_temperature=True) == []
    assert sampling_deviations({**PURE_SAMPLING, "temperature": 0}, any_temperature=True) == ["temperature=0"]
    # Left out, a backend applies its own default (HF: top_k 50, temperature from the model's config).
    for key in PURE_SAMPLING:
        missing = {k: v for k, v in PURE_SAMPLING.items() if k != key}
        assert sampling_deviations(missing) == [f"{key}=None"]
    assert sampling_deviations({**PURE_SAMPLING, "top_k": None}) == ["top_k=None"]
    assert sampling_deviations({**PURE_SAMPLING, "top_k": False}) == ["top_k=False"]  # not 0
    assert sampling_deviations({**PURE_SAMPLING, "top_k": 50, "top_p": 0.9}) == ["top_p=0.9", "top_k=50"]


def test_every_sampling_task_samples_purely(calbench_tasks):
    tasks = calbench_tasks
    generating = [t for t in tasks.values() if t.config.output_type == "generate_until"]
    sampling = [t for t in generating if t.config.task not in GREEDY_TASKS]
    assert len(sampling) >= 8
    for task in [t for t in generating if t.config.task in GREEDY_TASKS]:  # the capability tasks: greedy
        gen = dict(task.config.generation_kwargs)
        assert greedy_deviations(gen) == [] and gen["repetition_penalty"] == 1.0, task.config.task
        assert decoding_deviations(task.config.task, gen) == []
    assert {t.config.task for t in generating} >= set(GREEDY_TASKS)
    for task in sampling:
        gen = dict(task.config.generation_kwargs)
        assert {k: gen[k] for k in PURE_SAMPLING} == dict(PURE_SAMPLING), task.config.task
        assert sampling_deviations(gen) == [], task.config.task
        assert gen["repetition_penalty"] == 1.0  # overrides a model's generation_config.json


def test_backend_and_results_store_share_the_definition():
    eos = "<eos>"
    assert _sampler_temperature(dict(PURE_SAMPLING), [], eos) == 1.0
    assert _sampler_temperature({**PURE_SAMPLING, "temperature": 0.7}, [eos], eos) == 0.7  # any T for the backend
    assert _sampler_temperature({**PURE_SAMPLING, "top_k": None}, [], eos) is None  # HF would default to 50
    assert _sampler_temperature({**PURE_SAMPLING, "min_p": 0.1}, [], eos) is None  # another setting: HF generate
    assert _sampler_temperature({**PURE_SAMPLING, "repetition_penalty": 1.0}, [], eos) == 1.0  # neutral: ours
    assert _sampler_temperature(dict(PURE_SAMPLING), ["\n"], eos) is None  # a stop string: HF generate
    assert _sampler_temperature({"do_sample": False, "temperature": 0.0}, [eos], eos) == 0.0  # greedy: ours
    assert _sampler_temperature({"do_sample": False}, [eos], eos) == 0.0
    assert _sampler_temperature({"do_sample": False, "num_beams": 4}, [eos], eos) is None  # beams: HF generate
    run = {"config": {}, "configs": {"t": {"output_type": "generate_until", "generation_kwargs": dict(PURE_SAMPLING)}}}
    check_run(run)
    run["configs"]["t"]["generation_kwargs"] = {**PURE_SAMPLING, "top_k": None}
    with pytest.raises(RefusedRunError, match="top_k=None"):
        check_run(run)
    # the capability tasks are held to greedy decoding instead
    greedy = {"do_sample": False, "temperature": 0.0, "repetition_penalty": 1.0}
    run["configs"] = {GREEDY_TASKS[0]: {"output_type": "generate_until", "generation_kwargs": greedy}}
    check_run(run)
    run["configs"][GREEDY_TASKS[0]]["generation_kwargs"] = {**greedy, "repetition_penalty": 1.3}
    with pytest.raises(RefusedRunError, match=r"did not decode greedily \(repetition_penalty=1.3\)"):
        check_run(run)
    run["configs"][GREEDY_TASKS[0]]["generation_kwargs"] = dict(PURE_SAMPLING)
    with pytest.raises(RefusedRunError, match="do_sample=True"):
        check_run(run)
    run["configs"] = {"t": {"output_type": "generate_until", "generation_kwargs": greedy}}  # a sampling task
    with pytest.raises(RefusedRunError, match="did not sample at pure T=1"):
        check_run(run)


def test_run_defaults():
    assert policy.needs_thinking_default("hf", "pretrained=x")
    assert not policy.needs_thinking_default("hf", "pretrained=x,enable_thinking=True")
    assert not policy.needs_thinking_default("hf", None)
    assert not policy.needs_thinking_default("calbench-oracle", "seed=1")
    assert policy.run_metadata("calbench-oracle") == {"calbench_terminator": ""}
    assert policy.run_metadata("calbench-hf") == {policy.FIRST_TOKEN_METADATA: True}
    assert policy.run_metadata("hf") == {}
