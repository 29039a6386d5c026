"""calbench's sampling tasks on lm-eval's API backends against a real server: vLLM's
OpenAI-compatible server from its CPU build (``vllm serve``, in ``.ci/vllm-cpu-env``'s
environment; CI runs this module there with ``pytest -m vllm``), serving SmolLM2-135M-Instruct
as ``smollm2`` and the published soft adapter as the LoRA module ``smollm2-soft``.

The server starts and stops inside the tests, on 127.0.0.1 only, behind an API key; every
request loop is bounded (the requests of one run). One start costs 1-2 minutes on a 2-core CPU.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from calbench import api_support, lm_eval_io, tasks_path
from tests.helpers import pooled_chisquare, read_samples_log

pytestmark = pytest.mark.vllm

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("CALBENCH_REQUIRE_VLLM") == "1":
        raise RuntimeError("CALBENCH_REQUIRE_VLLM=1 but vLLM is not importable: run bash .ci/vllm-cpu-env first")
    pytest.skip("vLLM is not installed here (bash .ci/vllm-cpu-env makes its environment)", allow_module_level=True)

ADAPTER = Path(tasks_path()).parent / "leaderboards" / "adapters" / "smollm2-135m-instruct-soft"
KEY = "calbench-test-key"
START_TIMEOUT = 1200  # seconds for the server to list its models (2 minutes on a busy 2-core machine)
P_MIN = 1e-4  # tests of a correct sampler fail at this rate, each
REQUEST = "POST /v1/chat/completions HTTP/1.1"
# vLLM 0.32's CPU build fails a seeded request whose prompt it prefills in chunks ("CPU Generator does not use
# offset": it rewinds the request's generator, which a CPU generator cannot), and then its engine is dead. A
# step's prompts must fit its token budget: at most 32 requests (of about 60 prompt tokens) in 8192 tokens.
NO_CHUNKED_PREFILL = ["--max-num-seqs", "32", "--max-num-batched-tokens", "8192"]


class Server:
    """``vllm serve`` in a subprocess of its own session, its log in a file (each request is a line)."""

    def __init__(self, model_dir: str, log: Path) -> None:
        self.model_dir, self.log = model_dir, log
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def start(self) -> None:
        vllm = str(Path(sys.executable).with_name("vllm"))
        cmd = [vllm, "serve", self.model_dir, "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
               "--enforce-eager", "--max-model-len", "2048", "--served-model-name", "smollm2", "--enable-lora",
               "--lora-modules", f"smollm2-soft={ADAPTER}", "--max-lora-rank", "16", "--api-key", KEY,
               *NO_CHUNKED_PREFILL]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
        with self.log.open("a") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited {self.process.returncode}: {self.log.read_text()[-3000:]}")
            try:
                request = urllib.request.Request(self.url.replace("chat/completions", "models"))
                request.add_header("Authorization", f"Bearer {KEY}")
                with urllib.request.urlopen(request, timeout=5) as reply:
                    if "smollm2-soft" in reply.read().decode():
                        return
            except OSError:
                pass
            time.sleep(2)
        self.stop()
        raise RuntimeError(f"vllm serve did not list its models within {START_TIMEOUT} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def requests(self) -> int:
        """HTTP requests answered so far (its log's lines; across restarts: the log is appended)."""
        return self.log.read_text().count(f'"{REQUEST}" 200')


@pytest.fixture(scope="module")
def server(smollm2, tmp_path_factory):
    s = Server(str(smollm2), tmp_path_factory.mktemp("vllm-serve") / "server.log")
    s.start()
    yield s
    s.stop()


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # lm-eval's local backends send it as the Bearer token


def _cli(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **env}, timeout=1800)


# ---- lm-eval's defaults: the samples of a prompt must not be one answer


def test_plain_lm_eval_draws_each_sample_apart(server, tmp_path):
    """The issue's command, on lm-eval's own backend: before calbench's seed guard each of the 4
    prompts' 10 samples was one answer repeated (every request carried seed 1234)."""
    args = f"model=smollm2,base_url={server.url},num_concurrent=4,tokenizer_backend=None"
    cmd = ["lm_eval", "--model", "local-chat-completions", "--model_args", args, "--include_path", str(tasks_path()),
           "--tasks", "calbench_numeric_quick", "--metadata", json.dumps({"num_samples": 10}), "--apply_chat_template",
           "--limit", "4", "--log_samples", "--output_path", str(tmp_path)]  # fmt: skip
    before = server.requests()
    done = _cli(cmd, OPENAI_API_KEY=KEY)
    assert done.returncode == 0, done.stderr[-4000:]
    assert server.requests() - before == 40  # one request per sample
    (results,) = tmp_path.rglob("results_*.json")
    samples = read_samples_log(lm_eval_io.samples_log(results, "calbench_numeric_quick"))
    assert len(samples) == 4
    for sample in samples:
        answers = [r for group in sample["resps"] for r in group]
        assert len(answers) == 10
        assert len(set(answers)) > 1, answers
        seeds = [arg["arg_1"]["seed"] for arg in sample["arguments"].values()]
        assert len(set(seeds)) == 10
    config = json.loads(results.read_text())["configs"]["calbench_numeric_quick"]
    assert config["metadata"][api_support.METADATA_PLAN]["sent"]["top_k"] == 0


def test_calbench_eval_n_samples_per_request(server, tmp_path, api_key):
    cmd = ["calbench", "eval", "--model", "calbench-chat-completions", "--model_args",
           f"model=smollm2-soft,base_url={server.url},n=5,num_concurrent=4", "--tasks", "calbench_numeric_quick",
           "--apply_chat_template", "--num-samples", "10", "--limit", "4", "-o", str(tmp_path)]  # fmt: skip
    before = server.requests()
    done = _cli(cmd, OPENAI_API_KEY=KEY)
    assert done.returncode == 0, done.stderr[-4000:]
    assert server.requests() - before == 1 + 8  # calbench's probe, then 4 prompts x 10 samples, 5 per request
    (results,) = tmp_path.rglob("results_*.json")
    for sample in read_samples_log(lm_eval_io.samples_log(results, "calbench_numeric_quick")):
        assert sum(len(group) for group in sample["resps"]) == 10


# ---- the law: the server's samples against the model's exact probabilities (stock hf)


GEN = {"until": [], "temperature": 1.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0, "max_gen_toks": 4}
VALUES = range(41)  # answers str(k): at most 2 digits and the end of turn, within 4 tokens (one token a digit)
N_BASE, N_ADAPTER = 200, 150
PROMPT = (
    "Generate exactly ONE random number from a Poisson distribution with parameters lambda=4. Output ONLY the number."
)


def _categories(answers, values):
    counts = collections.Counter(answers)
    listed = [counts.pop(str(k), 0) for k in values]
    return np.array([*listed, sum(counts.values())], dtype=float)


def _api_samples(server, model, n_total, per_request, seed_offset):
    """``n_total`` samples of PROMPT through calbench-chat-completions, ``per_request`` per request,
    each sample with its own seed."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.api_models import JsonChatStr

    from calbench.backends.api import ChatCompletions

    lm = ChatCompletions(model=model, base_url=server.url, n=per_request, num_concurrent=8)
    context = JsonChatStr(json.dumps([{"role": "user", "content": PROMPT}]))
    requests = [
        Instance(
            "generate_until", {}, (context, {**GEN, "seed": api_support.sample_seed(seed_offset, "law", "p", i)}), i
        )
        for i in range(n_total)
    ]
    return lm.generate_until(requests)


@pytest.fixture(scope="module")
def api_samples(server):
    os.environ["OPENAI_API_KEY"] = KEY
    return {
        "base": _api_samples(server, "smollm2", N_BASE, 1, 1),  # one request per sample
        "base_n": _api_samples(server, "smollm2", N_BASE, 10, 2),  # ten per request
        "adapter": _api_samples(server, "smollm2-soft", N_ADAPTER, 10, 3),  # the LoRA module
    }


@pytest.fixture(scope="module")
def exact_law(smollm2):
    """P(answer str(k) then the end of turn) under stock lm-eval ``hf``, the model and the adapter (``peft=``)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoTokenizer

    context = AutoTokenizer.from_pretrained(smollm2).apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )

    def law(**extra):
        lm = HFLM(pretrained=str(smollm2), dtype="float32", device="cpu", batch_size=16, **extra)
        requests = [Instance("loglikelihood", {}, (context, f"{k}<|im_end|>"), i) for i, k in enumerate(VALUES)]
        return np.exp([ll for ll, _ in lm.loglikelihood(requests)])

    return {"base": law(), "adapter": law(peft=str(ADAPTER))}


@pytest.mark.parametrize("name", ["base", "base_n", "adapter"])
def test_the_servers_samples_follow_the_models_exact_law(api_samples, exact_law, name):
    p = exact_law["adapter" if name == "adapter" else "base"]
    answers = api_samples[name]
    observed = _categories(answers, VALUES)
    test = pooled_chisquare(observed, len(answers) * np.append(p, 1 - p.sum()))
    print(f"{name}: P(integer 0..40) = {p.sum():.4f}; chi-square p = {test.pvalue:.4g} over {test.cells} cells; "
          f"{len(set(answers))} distinct of {len(answers)}")  # fmt: skip
    assert test.cells >= 2  # a test of one cell could not fail
    assert test.pvalue > P_MIN
    assert len(set(answers)) >= 10  # draws, not copies


def test_n_per_request_draws_as_separate_requests_do(api_samples):
    from scipy import stats

    def category(answer):
        return answer if answer.isdigit() else "word:" + (answer.split() or [""])[0]

    counts = [collections.Counter(map(category, api_samples[k])) for k in ("base", "base_n")]
    common = sorted(c for c, k in (counts[0] + counts[1]).items() if k >= 10)
    table = np.array([[c[k] for k in common] + [sum(c.values()) - sum(c[k] for k in common)] for c in counts])
    table = table if table[:, -1].sum() >= 10 else table[:, :-1]
    assert table.shape[1] >= 3, table
    test = stats.chi2_contingency(table)
    print(f"n=10 against separate requests, {table.shape[1]} categories: chi-square p = {test.pvalue:.4g}")
    assert test.pvalue > P_MIN


# ---- mistakes: one line, exit 2, before any request


@pytest.mark.parametrize("case", ["endpoint", "key", "model"])
def test_a_bad_endpoint_key_or_model_is_one_line(server, case):
    url = server.url.replace(str(server.port), "9") if case == "endpoint" else server.url
    model = "no-such-model" if case == "model" else "smollm2"
    cmd = ["calbench", "eval", "--model", "local-chat-completions", "--model_args", f"model={model},base_url={url}",
           "--tasks", "calbench_numeric_quick", "--apply_chat_template"]  # fmt: skip
    before = server.requests()
    done = _cli(cmd, OPENAI_API_KEY="wrong" if case == "key" else KEY)
    message = {"endpoint": "no OpenAI-compatible server answers there", "key": "refused the API key (HTTP 401",
               "model": "model=no-such-model: the server at"}[case]  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and message in lines[-1] and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert server.requests() == before


# ---- a server that dies mid-run: the rerun resumes from the per-sample cache (last: it restarts the server)


def _cached(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM unnamed").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_a_server_that_dies_mid_run_resumes_from_the_cache(server, tmp_path):
    cache = tmp_path / "cache" / "run"
    db = Path(f"{cache}_rank0.db")
    total = 6 * 10
    cmd = ["calbench", "eval", "--model", "calbench-chat-completions", "--model_args",
           f"model=smollm2-soft,base_url={server.url},num_concurrent=2,max_retries=2", "--tasks",
           "calbench_numeric_quick", "--apply_chat_template", "--num-samples", "10", "--limit", "6",
           "--use_cache", str(cache), "-o", str(tmp_path / "out")]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 600
    while _cached(db) < 15 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    server.stop(signal.SIGKILL)  # mid-run: the server is gone
    _, err = run.communicate(timeout=600)
    cached = _cached(db)
    assert run.returncode == 2 and "Traceback" not in err, err[-3000:]  # one line, exit 2
    assert 15 <= cached < total, cached
    server.start()
    before = server.requests()
    done = _cli(cmd, OPENAI_API_KEY=KEY)
    assert done.returncode == 0, done.stderr[-4000:]
    assert server.requests() - before == 1 + total - cached  # the probe; what was answered is not asked again
    assert _cached(db) == total
    (results,) = (tmp_path / "out").rglob("results_*.json")
    samples = read_samples_log(lm_eval_io.samples_log(results, "calbench_numeric_quick"))
    assert [sum(len(g) for g in s["resps"]) for s in samples] == [10] * 6  # nothing lost, nothing counted twice
