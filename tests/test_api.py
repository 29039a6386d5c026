"""calbench's sampling tasks on lm-eval's API backends, offline: against ``tests/seeded_server.py``,
a stand-in that answers as a server honouring seeds does (one seed, one answer). The same cases
run against vLLM's real OpenAI-compatible server in ``tests/test_api_server.py`` (CI's vLLM step).

On lm-eval's defaults every request of a prompt carries ``seed=1234``, so the stand-in, like vLLM,
answers the N samples of a prompt with one answer: the tests below fail there.
"""

from __future__ import annotations

import json
import math

import pytest

from calbench import api_support, evaluation
from calbench.cli import main
from tests.helpers import integration_except
from tests.seeded_server import SeededServer

N = 6
LIMIT = 4


def _one_line(capsys, message: str) -> str:
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("calbench eval: ")]
    assert len(ours) == 1 and message in ours[0] and "Traceback" not in err, err[-3000:]
    return ours[0]


def _run(backend: str, server: SeededServer, route: str = "chat/completions", extra: str = "", **kwargs):
    args = f"model={server.model},base_url={server.base}/{route}" + (f",{extra}" if extra else "")
    kwargs.setdefault("limit", LIMIT)
    return evaluation.evaluate(
        backend,
        kwargs.pop("tasks", ["calbench_numeric_quick"]),
        model_args=args,
        num_samples=kwargs.pop("num_samples", N),
        apply_chat_template=route == "chat/completions",
        output_path=kwargs.pop("output_path", None),
        **kwargs,
    )


def _answers(results, task="calbench_numeric_quick"):
    return [[r for group in s["resps"] for r in group] for s in results["samples"][task]]


# ---- the seed of each sample (pure)


def test_sample_seeds_are_distinct_reproducible_and_fit_32_bits():
    seeds = [
        api_support.sample_seed(1234, "calbench_numeric_quick", f"unseen/{d}", i) for d in range(42) for i in range(100)
    ]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**31 - 1 for s in seeds)
    assert seeds[:3] == [api_support.sample_seed(1234, "calbench_numeric_quick", "unseen/0", i) for i in range(3)]
    assert api_support.sample_seed(1, "t", "d", 0) != api_support.sample_seed(2, "t", "d", 0)  # the run's seed counts
    assert api_support.sample_seed(1, "t", "d", 0) != api_support.sample_seed(1, "u", "d", 0)  # and the task


def test_join_samples_joins_requests_that_differ_in_their_seed_only():
    gen = {"temperature": 1.0, "max_gen_toks": 8}
    requests = [("a", {**gen, "seed": i}) for i in range(5)] + [("b", {**gen, "seed": 9}), ("a", {**gen, "top_p": 0.5})]
    runs = api_support.join_samples(requests, 2)
    assert runs == [[0, 1], [2, 3], [4], [5], [6]]
    assert api_support.join_samples(requests, 1) == [[i] for i in range(7)]


def test_each_backend_sends_what_its_api_takes():
    gen = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}
    sent = api_support.sent_settings(gen, "openai-chat-completions", 7)
    assert sent == {"until": [], "temperature": 1.0, "top_p": 1.0, "seed": 7}
    local = {k: v for k, v in gen.items() if k != "do_sample"}
    assert api_support.sent_settings(gen, "local-chat-completions", 7) == {**local, "seed": 7}
    line = api_support.withheld_line(gen, "openai-chat-completions")
    assert line is not None and "top_k=0" in line and "repetition_penalty=1.0" in line and "\n" not in line
    assert api_support.withheld_line(gen, "local-chat-completions") is None


# ---- the seed guard, through lm-eval's own backends


@pytest.mark.parametrize(
    "backend", integration_except("local-chat-completions", ["local-chat-completions", "calbench-chat-completions"])
)
def test_the_samples_of_a_prompt_are_independent_draws(backend):
    """Fails on lm-eval's defaults: there every request carries seed 1234 and each prompt's N
    samples are one answer."""
    with SeededServer() as server:
        results = _run(backend, server)
        seeds = [p["seed"] for p in server.payloads]
    assert len(seeds) == LIMIT * N and len(set(seeds)) == len(seeds)
    for answers in _answers(results):
        assert len(answers) == N
        assert len(set(answers)) > 1, answers  # 6 draws of 41 values: all equal has probability 41^-5
    plan = results["configs"]["calbench_numeric_quick"]["metadata"][api_support.METADATA_PLAN]
    assert plan["backend"] == backend and plan["run_seed"] == 1234 and plan["requests_per_prompt"] == N


@pytest.mark.integration
def test_completions_and_the_runs_seed():
    with SeededServer() as server:
        first = _answers(_run("local-completions", server, "completions", "tokenizer_backend=None"))
        again = _answers(_run("local-completions", server, "completions", "tokenizer_backend=None"))
        other = _answers(
            _run("local-completions", server, "completions", "tokenizer_backend=None", fewshot_random_seed=7)
        )
    assert first == again  # the same --seed, the same seeds: the same draws from a seeded server
    assert first != other
    assert all(len(set(a)) > 1 for a in first)


@pytest.mark.integration
def test_openai_chat_completions_sends_no_top_k_and_says_so(monkeypatch, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with SeededServer(strict=True, key="k") as server:  # refuses top_k and repetition_penalty, as OpenAI does
        results = _run("openai-chat-completions", server)
        sent = server.payloads
    assert sent and all("top_k" not in p and "repetition_penalty" not in p and p["top_p"] == 1.0 for p in sent)
    lines = [r.getMessage() for r in caplog.records if "does not send" in r.getMessage()]
    assert len(lines) == 1 and "top_k=0" in lines[0] and "repetition_penalty=1.0" in lines[0]
    plan = results["configs"]["calbench_numeric_quick"]["metadata"][api_support.METADATA_PLAN]
    assert set(plan["withheld"]) == {"do_sample", "top_k", "repetition_penalty"}


@pytest.mark.integration
@pytest.mark.parametrize(
    "task",
    ["calbench_numeric_quick_seeded", "calbench_numeric_quick_ssot", "calbench_numeric_quick_verbalized",
     "calbench_mcq_balance", "calbench_open_ended"],
)  # fmt: skip
def test_every_sampling_task_runs_on_an_api_one_seed_per_request(task):
    """The other protocols and the transfer tasks too (the seeded protocol's prompt is its messages'
    JSON on a chat backend: its seed string goes in there)."""
    with SeededServer() as server:
        results = _run("local-chat-completions", server, tasks=[task], num_samples=4, limit=2)
        seeds = [p["seed"] for p in server.payloads]
    assert seeds and len(set(seeds)) == len(seeds)
    assert task in results["results"]


@pytest.mark.integration
def test_the_batch_protocol_sends_one_request_per_k_samples_each_with_its_seed():
    with SeededServer() as server:
        _run("local-chat-completions", server, tasks=["calbench_numeric_quick_batch"], num_samples=20)
        seeds = [p["seed"] for p in server.payloads]
    assert len(seeds) == LIMIT * 2 and len(set(seeds)) == len(seeds)  # K = 10 numbers per request


@pytest.mark.parametrize(("backend", "route"), [("calbench-chat-completions", "chat/completions"),
                                              pytest.param("calbench-completions", "completions", marks=pytest.mark.integration)])  # fmt: skip
def test_n_samples_per_request(backend, route):
    with SeededServer() as server:
        results = _run(backend, server, route, "n=4,num_concurrent=4", num_samples=10)
        ns = sorted(p.get("n", 1) for p in server.payloads)
    assert ns == sorted([4, 4, 2] * LIMIT)  # 10 samples: 4 + 4 + 2 per prompt, 3 requests not 10
    assert all(len(a) == 10 and len(set(a)) > 1 for a in _answers(results))


@pytest.mark.integration
def test_a_server_that_ignores_n_is_named():
    with SeededServer(ignore_n=True) as server, pytest.raises(RuntimeError, match="ignores n"):
        _run("calbench-chat-completions", server, "chat/completions", "n=3", num_samples=3, limit=1)


# ---- one line, exit 2, before any request


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("seed=5", "seed=5 in --model_args"),
        ("n=4", "n=4 in --model_args: local-chat-completions reads one answer per request"),
    ],
)
def test_what_would_send_one_seed_to_every_sample_is_refused(extra, message, capsys):
    with SeededServer() as server:
        argv = [
            "--model",
            "local-chat-completions",
            "--model_args",
            f"model=stub,base_url={server.base}/chat/completions,{extra}",
        ]
        assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "--apply_chat_template"]) == 2
        assert server.payloads == []
    _one_line(capsys, message)


def test_a_chat_backend_without_a_chat_template_is_one_line(capsys):
    argv = [
        "--model",
        "local-chat-completions",
        "--model_args",
        "model=m,base_url=http://127.0.0.1:9/v1/chat/completions",
    ]
    assert main(["eval", *argv, "--tasks", "calbench_numeric_quick"]) == 2
    _one_line(capsys, "--model local-chat-completions sends chat messages: add --apply_chat_template")


def test_plain_lm_eval_refuses_a_seed_model_argument_before_any_request():
    with SeededServer() as server, pytest.raises(api_support.ApiSetupError, match="seed=9 in --model_args"):
        _run("local-chat-completions", server, extra="seed=9")
    assert server.payloads == []


@pytest.mark.integration
def test_a_backend_that_keeps_its_own_seed_is_refused(monkeypatch):
    from lm_eval.models.openai_completions import LocalChatCompletion

    original = LocalChatCompletion._create_payload

    def fixed(self, *args, **kwargs):
        return {**original(self, *args, **kwargs), "seed": 1234}

    monkeypatch.setattr(LocalChatCompletion, "_create_payload", fixed)
    with SeededServer() as server, pytest.raises(api_support.ApiSetupError, match="carry its own seed"):
        _run("local-chat-completions", server)
    assert server.payloads == []


@pytest.mark.parametrize("case", ["endpoint", "key", "model"])
def test_a_bad_endpoint_key_or_model_is_one_line(case, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "wrong" if case == "key" else "right")
    with SeededServer(key="right") as server:
        base = f"http://127.0.0.1:{server.port + 1 if case == 'endpoint' else server.port}/v1/chat/completions"
        model = "nosuchmodel" if case == "model" else "stub"
        argv = ["--model", "local-chat-completions", "--model_args", f"model={model},base_url={base}"]
        assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "--apply_chat_template"]) == 2
        assert server.payloads == []
    message = {"endpoint": "no OpenAI-compatible server answers there", "key": "refused the API key (HTTP 401",
               "model": "model=nosuchmodel: the server at"}[case]  # fmt: skip
    _one_line(capsys, message)


@pytest.mark.parametrize(
    ("backend", "server_args", "extra", "message"),
    [
        (
            "local-chat-completions",
            {"strict": True},
            "",
            "the server rejects top_k (HTTP 400: Unrecognized request argument supplied: top_k)",
        ),
        ("calbench-chat-completions", {"ignore_n": True}, ",n=4", "the server ignores n (asked for 2 completions"),
    ],
)
def test_a_rejected_parameter_or_an_ignored_n_is_named_after_one_probe(backend, server_args, extra, message, capsys):
    with SeededServer(**server_args) as server:
        argv = ["--model", backend, "--model_args", f"model=stub,base_url={server.base}/chat/completions{extra}"]
        assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "--apply_chat_template"]) == 2
        (probe,) = server.payloads  # one request of one token, then nothing
    assert probe["max_tokens"] == 1
    _one_line(capsys, message)


def test_a_missing_api_package_is_one_line(capsys, monkeypatch):
    """It was lm-eval's ModuleNotFoundError traceback: no calbench extra installed tenacity."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tenacity" else find_spec(name, *a)
    )
    argv = [
        "--model",
        "local-chat-completions",
        "--model_args",
        "model=m,base_url=http://127.0.0.1:9/v1/chat/completions",
    ]
    assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "--apply_chat_template"]) == 2
    _one_line(capsys, "lm-eval's API backends need tenacity, not installed here: pip install -e '.[api]'")


# ---- the cost preview


def test_dry_run_counts_requests_and_tokens_and_sends_nothing(capsys):
    with SeededServer() as server:
        argv = [
            "--model",
            "calbench-chat-completions",
            "--model_args",
            f"model=stub,base_url={server.base}/chat/completions,n=10",
        ]
        assert main(["eval", "--dry-run", *argv, "--tasks", "calbench_numeric_quick,calbench_numeric_quick_batch",
                     "--apply_chat_template", "--num-samples", "100"]) == 0  # fmt: skip
        assert server.payloads == []
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("calbench_numeric")}
    # 42 prompts; 100 samples: 10 requests of n=10 each; the batch protocol: 10 requests of 10 numbers, 1 of n=10
    assert rows["calbench_numeric_quick"][1:4] == ["42", "100", "420"]
    assert rows["calbench_numeric_quick_batch"][1:4] == ["42", "100", "42"]
    assert "nothing was sent" in out and "total: 462 requests" in out
    # at most max_gen_toks per completion: 42 x 100 x 16 and 42 x 10 x 160
    assert (
        rows["calbench_numeric_quick"][5] == f"{42 * 100 * 16:,}"
        and rows["calbench_numeric_quick_batch"][5] == f"{42 * 10 * 160:,}"
    )
    prompt_tokens = int(rows["calbench_numeric_quick"][4].replace(",", ""))
    assert 42 * 10 * 20 < prompt_tokens < 42 * 10 * 60  # each of the 420 requests sends its prompt: 20-60 tokens


# ---- an interrupted run resumes from the per-sample cache


@pytest.mark.integration
def test_an_interrupted_run_resumes_from_the_cache_without_paying_again(tmp_path):
    cache = str(tmp_path / "cache" / "run")
    total = LIMIT * N
    with SeededServer(fail_after=10) as server:  # answers 10 requests, then fails every one
        with pytest.raises(Exception):  # noqa: B017 - lm-eval's retries end in the HTTP error
            _run("local-chat-completions", server, use_cache=cache, extra="max_retries=1")
        first = len(server.payloads)
    with SeededServer() as server:
        results = _run("local-chat-completions", server, use_cache=cache)
        second = len(server.payloads)
    assert 10 <= first < total and second == total - 10  # the 10 answered are not asked again
    answers = _answers(results)
    assert [len(a) for a in answers] == [N] * LIMIT  # nothing lost, nothing counted twice
    with SeededServer() as server:  # and the cached answers are the ones the seeds give
        assert _answers(_run("local-chat-completions", server)) == answers


# ---- the record states the backend, the endpoint's model and what was sent


@pytest.mark.integration
def test_the_record_and_the_page_state_the_endpoint_and_what_was_sent(tmp_path, monkeypatch):
    from calbench import lm_eval_io
    from calbench.leaderboard.pages import board
    from calbench.leaderboard.records import store

    with SeededServer() as server:
        argv = [
            "--model",
            "openai-chat-completions",
            "--model_args",
            f"model=stub,base_url={server.base}/chat/completions",
        ]
        import os

        os.environ["OPENAI_API_KEY"] = "k"
        assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "--apply_chat_template", "--num-samples", "2",
                     "-o", str(tmp_path / "out")]) == 0  # fmt: skip
    (results_file,) = (tmp_path / "out").rglob("results_*.json")
    part = store.evaluation_part(results_file, "main")
    model = part["model"]
    assert model["backend"] == "openai-chat-completions" and model["endpoint_model"] == "stub"
    assert model["endpoint"] == f"{server.base}/chat/completions"
    api = part["tasks"]["calbench_numeric_quick"]["api"]
    assert "top_k" not in api["sent"] and api["sent"]["temperature"] == 1.0 and api["requests_per_prompt"] == 2
    record = store.assemble_record("api-stub", "instruct", "calbench eval ...", {"main": part})
    line = board._describe(record)
    assert (
        "stub at http://127.0.0.1" in line and "sent " in line and "top_p=1.0" in line and "a seed per sample" in line
    )
    # a log whose samples share a seed is not this run's
    samples = lm_eval_io.task_samples(results_file, "calbench_numeric_quick")
    for s in samples:
        for arg in s["arguments"].values() if isinstance(s["arguments"], dict) else s["arguments"]:
            (arg["arg_1"] if isinstance(arg, dict) else arg[1])["seed"] = 1234
    results = lm_eval_io.load_results(results_file)
    with pytest.raises(lm_eval_io.LmEvalOutputError, match="do not each have a seed of their own"):
        lm_eval_io.check_log(results, "calbench_numeric_quick", samples, results_file)
    assert math.isfinite(
        json.loads(results_file.read_text())["results"]["calbench_numeric_quick"]["valid_rate,samples"]
    )
