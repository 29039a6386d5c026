"""The answer enumerator against brute force, and its metrics against independent references.

The brute-force fixture: a 2-layer random Llama (``calbench.tiny.tiny_llama``, half as wide and
with peaked next-token laws) over a 16-token vocabulary built here (digits 0, 1, 2, 3, 5, the point, both signs, "e", a merged "12", a space-led " 3", a space, a
line break, a letter, a non-stop special token and the stop token), so every sample of
up to 4 tokens can be listed and decoded the way the sampler decodes it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from calbench.backends.enumeration import (
    ACCEPTING,
    FRAC,
    INT,
    LEAD,
    TRAIL,
    AnswerSpace,
    Budget,
    TokenTable,
    advance,
    answer_space,
    enumerate_answers,
    value_range,
)
from calbench.families import make_target
from calbench.metrics.enumeration import discrete_w1, law_w1, score_enumeration, summarize, window
from calbench.parse import NUMBER_RE, parse_number
from calbench.space import canonical_space

PIECES = ["0", "1", "2", "3", "5", ".", "-", "+", "e", "12", "Ġ3", "Ġ", "Ċ", "x"]
SPECIALS = ["<|im_start|>", "<|im_end|>"]  # <|im_start|>: decoded as nothing; <|im_end|>: the stop token
CAP = 4


@pytest.fixture(scope="module")
def micro():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from calbench.tiny import tiny_llama

    vocab = {p: i for i, p in enumerate(PIECES)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("1", "2"), ("Ġ", "3")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[1])
    model = tiny_llama(
        len(tokenizer),
        seed=3,
        hidden_size=32,
        intermediate_size=64,
        max_position_embeddings=2048,
        initializer_range=0.4,  # peaked next-token laws, not near-uniform ones
        tie_word_embeddings=False,
    )
    model = model.eval().double()  # float64: tree and full forwards agree to 1e-12
    return model, tokenizer


def decode(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=True)


def table_of(tokenizer):
    stop = [tokenizer.eos_token_id]
    return TokenTable.build(lambda ids: decode(tokenizer, ids), len(tokenizer), stop, anchor=PIECES.index("0"))


@torch.no_grad()
def brute_force(model, tokenizer, prompt, cap, temperature=1.0):
    """Every sample of at most ``cap`` tokens (ending at the stop token or the cap), its
    probability from a full forward of each prefix, decoded and parsed as the sampler does."""
    stop = tokenizer.eos_token_id
    by_value: dict[float, float] = {}
    invalid = 0.0
    level = [((), 0.0)]
    for depth in range(cap):
        ids = torch.tensor([list(prompt) + list(p) for p, _ in level])
        logprobs = torch.log_softmax(model(ids).logits[:, -1].double() / temperature, -1)
        nxt = []
        for (path, lp), row in zip(level, logprobs, strict=True):
            for t in range(row.numel()):
                child, mass = (*path, t), lp + row[t].item()
                if t == stop or depth + 1 == cap:
                    value = parse_number(decode(tokenizer, list(child if t != stop else path)))
                    if value is None:
                        invalid += math.exp(mass)
                    else:
                        by_value[value] = by_value.get(value, 0.0) + math.exp(mass)
                else:
                    nxt.append((child, mass))
        level = nxt
    return by_value, invalid


@pytest.mark.parametrize("temperature,dtype", [(1.0, torch.float64), (0.7, torch.float64), (1.0, torch.float32)])
def test_enumeration_equals_brute_force(micro, temperature, dtype):
    model, tokenizer = micro
    model = copy.deepcopy(model).to(dtype)
    tol = 1e-9 if dtype == torch.float64 else 1e-6
    prompt = [PIECES.index("x"), PIECES.index("1"), PIECES.index("Ċ")]
    expected, invalid = brute_force(model, tokenizer, prompt, CAP, temperature)
    got = enumerate_answers(
        model,
        prompt,
        table_of(tokenizer),
        CAP,
        Budget(nodes=10**6, residual=0.0, batch=7),
        temperature=temperature,
        decode=lambda ids: decode(tokenizer, ids),
    )
    assert got.residual_mass == 0 and got.resolved_mass == 0
    assert got.decode_mismatch_mass == 0
    assert set(got.values.tolist()) == set(expected)
    for v, m in zip(got.values.tolist(), got.masses.tolist(), strict=True):
        assert m == pytest.approx(expected[v], abs=tol)
    assert got.invalid_mass == pytest.approx(invalid, abs=tol)
    assert got.masses.sum() + got.invalid_mass == pytest.approx(1.0, abs=1e-9)
    # merged by value: "1", "+1", "1." and "1.0" are one answer
    assert expected[1.0] > 0 and len(got.values) == len(set(got.values.tolist()))
    # the tree forward saw each expanded prefix once: tokens fed = prompt + expansions
    assert got.tokens_fed == len(prompt) + got.nodes - 1


SPACES = {
    "continuous": AnswerSpace((-9.0, 9.0), integer=False, window=(0.0, 2.0)),
    "integer": AnswerSpace((0.0, math.inf), integer=True, window=(0.0, 5.0)),
}


def test_budget_and_resolution_keep_every_unit_of_mass(micro):
    model, tokenizer = micro
    prompt = [PIECES.index("x"), PIECES.index("Ċ")]
    full = enumerate_answers(model, prompt, table_of(tokenizer), CAP, Budget(nodes=10**6, residual=0.0))
    few = enumerate_answers(model, prompt, table_of(tokenizer), CAP, Budget(nodes=20, residual=0.0, batch=4))
    coarse = {
        name: enumerate_answers(
            model,
            prompt,
            table_of(tokenizer),
            CAP,
            Budget(nodes=10**6, residual=0.0, resolution=0.5, refine=False),
            space=space,
        )
        for name, space in SPACES.items()
    }
    for e in (full, few, *coarse.values()):
        total = e.masses.sum() + e.invalid_mass + e.impossible_mass + e.resolved_mass + e.residual_mass
        assert total == pytest.approx(1.0, abs=1e-9)
    assert few.nodes == 20 and few.residual_mass > 0
    assert all(e.nodes < full.nodes for e in coarse.values())
    assert coarse["continuous"].resolved_mass > 0 and coarse["continuous"].impossible_mass > 0  # "-12"
    # "-1", "1.5": impossible for a law on 0, 1, 2, ...; an integer law's answers are never resolved
    assert coarse["integer"].impossible_mass > 0 and coarse["integer"].resolved_mass == 0
    # what a budget or the resolution rule cuts is only ever the part below a cut prefix: every
    # answer and every invalid unit found before the cut is also in the full enumeration
    full_mass = dict(zip(full.values.tolist(), full.masses.tolist(), strict=True))
    for e in (few, *coarse.values()):
        assert e.invalid_mass <= full.invalid_mass + 1e-12
        for v, m in zip(e.values.tolist(), e.masses.tolist(), strict=True):
            assert m <= full_mass[v] + 1e-12
    # and the frontier's intervals hold every value its prefixes reach in the full enumeration
    # (with exponents: "8" can still become "8e-3"), so a valid answer below it lies inside
    assert np.all(few.frontier[:, 0] <= few.frontier[:, 1])
    open_positive = few.frontier[(few.frontier[:, 0] >= 0) & (few.frontier[:, 0] < few.frontier[:, 1])]
    assert open_positive.size and np.all(open_positive[:, 1] == math.inf)  # only a finished number is a point


def without_exponents(micro):
    """The micro model, a prompt, its token table with "e" out of the language, and the full
    enumeration (the resolution rule speaks of continuations without an exponent)."""
    model, tokenizer = micro
    prompt = [PIECES.index("x"), PIECES.index("Ċ")]
    table = table_of(tokenizer)
    table = dataclasses.replace(table, candidates=table.candidates[table.candidates != PIECES.index("e")])
    return model, prompt, table, enumerate_answers(model, prompt, table, CAP, Budget(nodes=10**6, residual=0.0))


def possible(space: AnswerSpace, v: float) -> bool:
    lo, hi = space.support
    return lo <= v <= hi and (not space.integer or v == round(v))


@pytest.mark.parametrize("name", sorted(SPACES))
def test_resolution_places_each_cut_answer_inside_its_interval(micro, name):
    """Every answer of the full enumeration that the rule cut away is, clipped to the window,
    inside a resolved interval (if possible) or counted impossible (if not), and no more mass
    went to either than the full enumeration has below the cut prefixes. The rule speaks of
    continuations without an exponent (".1e1" is 1), so here "e" leaves the language."""
    space = SPACES[name]
    model, prompt, table, full = without_exponents(micro)
    rule = Budget(nodes=10**6, residual=0.0, resolution=0.5, refine=False)
    cut = enumerate_answers(model, prompt, table, CAP, rule, space=space)
    kept = dict(zip(cut.values.tolist(), cut.masses.tolist(), strict=True))
    intervals = [(mid - w / 2, mid + w / 2) for mid, w, _ in cut.resolved.tolist()]
    assert all(hi - lo < 0.5 for lo, hi in intervals)
    lost_possible = lost_impossible = 0.0
    for v, m in zip(full.values.tolist(), full.masses.tolist(), strict=True):
        lost = m - kept.get(v, 0.0)
        if lost <= 1e-12:
            continue
        if possible(space, v):
            c = space.clip(v, v)[0]
            assert any(a - 1e-12 <= c <= b + 1e-12 for a, b in intervals), (v, c, intervals)
            lost_possible += lost
        else:
            lost_impossible += lost
    # cut prefixes can also have ended invalid, so the rule's masses hold the lost answers and more
    assert lost_possible <= cut.resolved_mass + 1e-12
    assert lost_impossible <= cut.impossible_mass + 1e-12
    assert cut.resolved_mass + cut.impossible_mass <= lost_possible + lost_impossible + full.invalid_mass + 1e-12


@pytest.mark.parametrize("name", sorted(SPACES))
def test_valid_mass_interval_holds_the_exact_valid_mass(micro, name):
    """valid mass - resolved mass <= the exact valid mass <= valid mass + residual mass, with and
    without refinement; refining spends nodes on resolved prefixes and only ever shrinks
    their mass. (Without "e", as the rule speaks of continuations without an exponent.)"""
    space = SPACES[name]
    model, prompt, table, full = without_exponents(micro)

    exact = sum(m for v, m in zip(full.values.tolist(), full.masses.tolist(), strict=True) if possible(space, v))
    runs = {
        refine: enumerate_answers(
            model, prompt, table, CAP, Budget(nodes=10**6, residual=1e-4, resolution=0.5, refine=refine), space=space
        )
        for refine in (False, True)
    }
    for e in runs.values():
        complete = sum(m for v, m in zip(e.values.tolist(), e.masses.tolist(), strict=True) if possible(space, v))
        assert complete - 1e-12 <= exact <= complete + e.resolved_mass + e.residual_mass + 1e-12
        total = e.masses.sum() + e.invalid_mass + e.impossible_mass + e.resolved_mass + e.residual_mass
        assert total == pytest.approx(1.0, abs=1e-9)
    if name == "continuous":  # (an integer law resolves nothing)
        assert runs[True].resolved_mass <= min(1e-4, runs[False].resolved_mass) + 1e-12
        assert runs[True].nodes > runs[False].nodes and runs[False].resolved_mass > 0


@pytest.mark.parametrize(
    "text", ["3", "-3.5", "+.5", "3.", "1e3", "2.5E-3", " 7 \n", "\n-0.25", "3.14.", "3,4", "e5", ".", "-", "3e", "1 2"]
)
def test_lexer_accepts_exactly_the_parsers_language(text):
    state = advance(LEAD, text)
    accepted = state is not None and state in ACCEPTING
    assert accepted == (NUMBER_RE.fullmatch(text.strip()) is not None)


def test_value_range_holds_every_continuation():
    assert value_range(INT, "12") == (12.0, math.inf)
    assert value_range(FRAC, "3.14") == pytest.approx((3.14, 3.15))
    assert value_range(FRAC, "-3.14") == pytest.approx((-3.15, -3.14))
    assert value_range(TRAIL, "7") == (7.0, 7.0)
    assert value_range(FRAC, "0.9", exponents=True) == (0.0, math.inf)  # "0.9e-5"
    rng = np.random.default_rng(0)
    for _ in range(3000):  # random prefixes and continuations without an exponent stay inside
        whole = "".join(rng.choice(list("0123456789"), size=rng.integers(1, 4)))
        frac = "".join(rng.choice(list("0123456789"), size=rng.integers(0, 5)))
        sign = str(rng.choice(["", "-", "+"]))
        prefix = f"{sign}{whole}.{frac}"
        tail = "".join(rng.choice(list("0123456789"), size=rng.integers(0, 30)))
        lo, hi = value_range(advance(LEAD, prefix), prefix)
        assert lo <= float(prefix + tail) <= hi, (prefix, tail)
        e_lo, e_hi = value_range(advance(LEAD, prefix), prefix, exponents=True)
        assert e_lo <= float(f"{prefix}{tail}e{rng.integers(-9, 9)}") <= e_hi


FAMILIES = [
    ("gaussian", {"mu": 3.5, "sigma": 3.0}),
    ("beta", {"alpha": 2.0, "beta": 5.0}),
    ("cauchy", {"x0": 0.0, "gamma": 1.0}),
    ("binomial", {"n": 10, "p": 0.3}),
]


@pytest.mark.parametrize("family,params", FAMILIES)
def test_law_w1_against_scipy(family, params):
    """W1 of a discrete Q to the folded law equals scipy's W1 against a dense quantile grid of it."""
    target = make_target(family, params)
    rng = np.random.default_rng(1)
    space = canonical_space(target)
    x = np.append(rng.choice(space.values, size=40), [-1e6, 1e30])  # answers far outside are clipped
    w = rng.random(42)
    lower, upper = window(target)
    if target.integer:
        reference = stats.wasserstein_distance(np.clip(x, lower, upper), space.values, w, space.masses)
    else:
        grid = np.clip(target.law.ppf((np.arange(400_000) + 0.5) / 400_000), lower, upper)
        reference = stats.wasserstein_distance(np.clip(x, lower, upper), grid, w)
    assert law_w1(x, w, target) == pytest.approx(reference, rel=2e-4, abs=1e-6)


def test_oracle_distribution_scores_its_discretisation_only():
    """The canonical space (the oracle's answer) against the law: W1 equals scipy's, and the
    likelihood task's exact W1 of the same distribution against itself is 0."""
    target = make_target("gaussian", {"mu": 3.5, "sigma": 3.0})
    space = canonical_space(target)
    w1 = law_w1(space.values, space.masses, target)
    assert 0 < w1 < 0.01
    assert discrete_w1(space.values, space.masses, space.values, space.masses) == pytest.approx(0.0, abs=1e-12)


def test_discrete_w1_against_scipy():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=30), rng.normal(1, 2, size=50)
    w, v = rng.random(30), rng.random(50)
    assert discrete_w1(x, w, y, v) == pytest.approx(stats.wasserstein_distance(x, y, w, v))


def test_score_enumeration_classifies_and_bounds():
    from calbench.metrics.enumeration import Enumeration

    target = make_target("beta", {"alpha": 2.0, "beta": 5.0})
    enum = Enumeration(
        values=np.array([-1.0, 0.25, 0.5, 7.0]),
        masses=np.array([0.05, 0.4, 0.2, 0.05]),
        resolved=np.array([[0.305, 0.01, 0.1]]),
        frontier=np.array([[0.0, math.inf, 0.05]]),
        invalid_mass=0.13,
        impossible_mass=0.02,
    )
    r = score_enumeration(target, enum)
    assert r["valid_mass"] == pytest.approx(0.7)
    assert r["support_violation_mass"] == pytest.approx(0.12)
    assert r["residual_mass"] == pytest.approx(0.05)
    q = np.array([0.25, 0.305, 0.5]), np.array([0.4, 0.1, 0.2]) / 0.7
    assert r["enum_w1"] == pytest.approx(law_w1(*q, target))
    lower, upper = window(target)
    assert 0 < lower < 0.25 and 0.5 < upper < 1
    # [0, inf) (exponents included) clipped to the window: the worst point is one of its edges
    worst = max(np.sum(q[1] * np.abs(q[0] - y)) for y in (lower, upper))
    assert r["enum_w1_bound"] == pytest.approx(0.1 * 0.01 / 2 / 0.7 + 0.05 / 0.75 * worst)
    # the bound holds, with no assumption on the residual: its mass placed anywhere at all
    # (beyond the window it is clipped to the edge) moves W1 by less
    for y in [-50.0, *np.linspace(0.0, 1.0, 21), 1e9]:
        moved = law_w1(np.append(q[0], y), np.append(q[1] * 0.7, 0.05), target)
        assert abs(moved - r["enum_w1"]) <= r["enum_w1_bound"] + 1e-12
    s = summarize([r, r | {"family": "gaussian"}])
    assert s.overall["valid_mass"].value == pytest.approx(0.7)
    assert s.overall["enum_w1_iqr_median"].value == pytest.approx(r["enum_w1_iqr"])


def test_every_sample_length_is_listed(micro):
    """The brute force itself: its masses sum to 1 (every path of the sampler counted once)."""
    model, tokenizer = micro
    by_value, invalid = brute_force(model, tokenizer, [PIECES.index("x")], 3)
    assert sum(by_value.values()) + invalid == pytest.approx(1.0, abs=1e-12)


# ---- the sample-free tasks through lm-eval ------------------------------------------------

EXACT = ["calbench_numeric_unseen_exact", "calbench_numeric_heldout_exact"]


@pytest.mark.parametrize("task", EXACT)
def test_references_answer_the_exact_tasks(task, references):
    oracle_run = references("exact", "calbench-oracle")
    oracle = oracle_run.results[task]
    collapsed = references("exact", "calbench-collapsed").results[task]
    # each prompt's enum_w1 is the exact W1 of the law's canonical space (16,384 points) to the law
    from calbench.space import DEFAULT_DECIMALS, HARD_MAX_BINS

    for sample in oracle_run.samples(task):
        record = sample["valid_mass"]
        target = make_target(record["family"], record["params"])
        space = canonical_space(target, DEFAULT_DECIMALS, HARD_MAX_BINS)
        assert record["enum_w1"] == pytest.approx(law_w1(space.values, space.masses, target), rel=1e-9, abs=1e-15)
    for r in (oracle, collapsed):
        assert r["valid_mass,none"] == 1.0 and r["invalid_mass,none"] == 0.0 and r["residual_mass,none"] == 0.0
    # the oracle's canonical-space law is the law up to its discretisation; the mode is far from it
    assert oracle["enum_w1_iqr_median,none"] < 2e-3 < 0.2 < collapsed["enum_w1_iqr_median,none"]
    assert oracle["enum_pit_w1,none"] < 0.01 < 0.2 < collapsed["enum_pit_w1,none"]


def test_exact_task_on_calbench_hf_matches_a_direct_enumeration(tiny_split):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from calbench import evaluation, harness
    from calbench.metrics.enumeration import score_enumeration
    from tests.helpers import evaluate_local

    task = "calbench_numeric_unseen_exact"
    metadata = {"calbench_enum_nodes": 60, "calbench_enum_batch": 16}
    results = evaluate_local("calbench-hf", [task], tiny_split, apply_chat_template=True, limit=2, metadata=metadata)
    samples = results["samples"][task]
    assert len(samples) == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_split)
    model = AutoModelForCausalLM.from_pretrained(tiny_split, dtype=torch.float32).eval()
    loaded = evaluation.task_manager(metadata, include_defaults=False).load([task])["tasks"][task]
    for sample in samples:
        doc = sample["doc"]
        record = sample["valid_mass"]
        total = record["valid_mass"] + record["support_violation_mass"] + record["invalid_mass"]
        assert total + record["residual_mass"] == pytest.approx(1.0, abs=1e-6)
        assert record["nodes"] <= 60 and record["decode_mismatch_mass"] == 0.0
        target = make_target(doc["family"], json.loads(doc["params"]))
        args = sample["arguments"]
        context = args["gen_args_0"]["arg_0"] if isinstance(args, dict) else args[0][0]
        ids = tokenizer(context, add_special_tokens=False)["input_ids"]
        settings = loaded._settings(target)
        anchor = tokenizer("0", add_special_tokens=False)["input_ids"][-1]
        table = TokenTable.build(
            lambda t: tokenizer.decode(t, skip_special_tokens=True), len(tokenizer), [tokenizer.eos_token_id], anchor
        )
        space = answer_space(settings["space"])
        direct = enumerate_answers(model, ids, table, 32, Budget(**settings["budget"]), space=space)
        again = score_enumeration(target, direct)
        assert again["valid_mass"] == pytest.approx(record["valid_mass"], abs=1e-6)
        assert again["invalid_mass"] == pytest.approx(record["invalid_mass"], abs=1e-6)
    assert isinstance(
        harness.EnumerationTask.summarize([s["valid_mass"] for s in samples]).overall["valid_mass"].value, float
    )


def test_backends_without_enumeration_refuse_clearly(tiny_split):
    from calbench.evaluation import EvalArgumentError, check_eval_args, lm_eval_args

    ns = lm_eval_args(["--model", "hf", "--tasks", "calbench_numeric_unseen_exact"])
    with pytest.raises(EvalArgumentError, match="--model calbench-hf"):
        check_eval_args(ns)
    # under plain lm_eval the backend itself refuses, naming the way out
    from lm_eval.models.huggingface import HFLM

    import calbench.harness  # noqa: F401 - installs the refusal

    with pytest.raises(NotImplementedError, match="calbench-hf"):
        HFLM.enumerate_numeric_answers(object.__new__(HFLM), [])


@pytest.mark.parametrize("family,params", [FAMILIES[0], FAMILIES[3]])
def test_weighted_pit_equals_the_sample_pit_on_repeated_values(family, params):
    """Masses instead of repeats: k copies of a value weigh what one value with weight k does."""
    from calbench.metrics import pit

    target = make_target(family, params)
    values = np.round(target.law.rvs(size=300, random_state=np.random.default_rng(4)), 1)
    distinct, counts = np.unique(values, return_counts=True)
    expected = pit.pit_w1(*pit.pit_intervals(values, target))
    got = pit.pit_w1_weighted(*pit.pit_intervals(distinct, target), counts / counts.sum())
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_mean_distances_equal_the_direct_sum():
    from calbench.metrics.enumeration import mean_distances

    rng = np.random.default_rng(5)
    x, w = rng.normal(size=50), rng.random(50)
    w /= w.sum()
    ys = np.concatenate([rng.normal(size=20) * 3, x[:5], [-1e9, 1e9]])  # ties with x and far points
    expected = np.array([np.sum(w * np.abs(x - y)) for y in ys])
    np.testing.assert_allclose(mean_distances(x, w, ys), expected, rtol=1e-12, atol=1e-9)
