"""Slow: the enumerator against many samples of the real default model, SmolLM2-135M-Instruct
(its own module: the longest test, which a parallel run starts on a worker of its own)."""

from __future__ import annotations

import pytest

from calbench import tasks_path
from tests.helpers import never_parses, sample_until_decided

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("adapter", [None, "soft"])
def test_enumeration_agrees_with_many_samples(smollm2, adapter, monkeypatch):
    """Proof that the enumerator is right on a real model: 2000 samples of SmolLM2 (base, and the
    published soft adapter) fall where the enumerated distribution says they must.

    The valid rate lies within 3 SE of the interval that holds the exact valid mass (the
    resolved mass may still end as text, the residual mass either way), and the sampled W1
    (``enum_w1``'s definition: both laws clipped to the law's window) within the 99% range of
    W1 over 400 sets of as many draws from the enumerated distribution, widened by its bound.

    The samples come from ``generate_until`` (calbench-hf's sampler), which here stops a sample
    as soon as no continuation of its text parses (``tests.helpers.sample_until_decided`` with
    ``never_parses``, a few tokens at a time): only
    validity and value are read, and both are then settled (the base model answers in prose, so
    this saves its 32-token continuations).
    """
    from pathlib import Path

    import numpy as np
    import torch
    from lm_eval.api.instance import Instance

    from calbench.backends import hf
    from calbench.backends.hf import CalbenchHFLM
    from calbench.families import make_target
    from calbench.harness import enumeration_settings
    from calbench.metrics.enumeration import law_w1, score_enumeration
    from calbench.parse import classify
    from calbench.prompt import prompt_text
    from calbench.stats import rate_se

    extra = {}
    if adapter:
        folder = Path(tasks_path()).parent / "leaderboards" / "adapters" / f"smollm2-135m-instruct-{adapter}"
        if not folder.exists():
            pytest.skip(f"no published {adapter} adapter at {folder}")
        extra["peft"] = str(folder)
    lm = CalbenchHFLM(pretrained=str(smollm2), dtype="float32", device="cpu", **extra)
    monkeypatch.setattr(
        hf, "sample_many", lambda *a: sample_until_decided(*a, decided=lambda t: never_parses(lm.tok_decode(t)))
    )
    torch.manual_seed(0)
    gen = {"until": [], "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_gen_toks": 32}
    rng = np.random.default_rng(0)
    for target in (make_target("gaussian", {"mu": 3.5, "sigma": 3.0}), make_target("poisson", {"lambda": 4.0})):
        context = lm.apply_chat_template([{"role": "user", "content": prompt_text(target)}])
        settings = enumeration_settings(target, nodes=3000, residual=0.005)
        (enum,) = lm.enumerate_numeric_answers([Instance("enumerate_numeric_answers", {}, (context, gen, settings), 0)])
        record = score_enumeration(target, enum)
        assert record["decode_mismatch_mass"] == 0.0
        answers = lm.generate_until([Instance("generate_until", {}, (context, dict(gen)), i) for i in range(2000)])
        scored = [classify(a, target) for a in answers]
        values = np.array([s.value for s in scored if s.valid], dtype=float)
        k = values.size
        slack = 3 * rate_se(k, len(answers))
        # The exact valid mass lies in [valid_mass - resolved_mass, valid_mass + residual_mass]:
        # resolved prefixes count as valid, but some go on into text; unresolved mass may go either way.
        lowest = record["valid_mass"] - record["resolved_mass"]
        highest = record["valid_mass"] + record["residual_mass"]
        print(
            f"{adapter or 'base'} {target.key}: valid mass {record['valid_mass']:.4f} (resolved "
            f"{record['resolved_mass']:.4f}, residual {record['residual_mass']:.4f}, {record['nodes']} prefixes) "
            f"vs valid rate {k / len(answers):.4f} ± {slack / 3:.4f}"
        )
        assert lowest - slack <= k / len(answers) <= highest + slack
        if k < 50:
            continue
        x, w = (
            np.array(list(enum.values) + list(enum.resolved[:, 0])),
            np.array(list(enum.masses) + list(enum.resolved[:, 2])),
        )
        keep = np.array([classify(repr(float(v)), target).valid for v in x])
        draws = rng.choice(x[keep], p=w[keep] / w[keep].sum(), size=(400, k))
        predicted = np.array([law_w1(row, np.ones(k), target) for row in draws])
        lo, hi = np.quantile(predicted, [0.005, 0.995])
        bound, sampled = record["enum_w1_bound"], law_w1(values, np.ones(k), target)
        print(
            f"{adapter or 'base'} {target.key}: enum_w1 {record['enum_w1']:.4f} (bound {bound:.4f}), "
            f"sampled W1 {sampled:.4f} from {k} valid, predicted 99% range [{lo:.4f}, {hi:.4f}]"
        )
        assert lo - bound <= sampled <= hi + bound, (target.key, sampled, lo, hi, bound)
