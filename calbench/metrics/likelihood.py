"""Likelihood metrics: how much probability a model puts on each canonical answer.

All are pure functions of the target masses P_Y, the model's log-probabilities
log π_Y(y) of each full answer (tokens plus terminator, given the prompt the model
samples from), and, for ``logit_kl``, the log-probability of every trie edge.

* ``seq_kl`` = KL(P_Y ‖ π_Y) = Σ_y P_Y(y) [log P_Y(y) - log π_Y(y)]: exact sequence-level
  KL (π_Y is not renormalised: mass outside Y is a loss).
* ``canonical_mass`` = Σ_y π_Y(y): the share of the model's answers that are canonical.
* ``exact_w1`` = W1 between π_Y renormalised over Y and P_Y, both on Y's values:
  Σ_j |G(x_j) - F(x_j)| (x_{j+1} - x_j) with G, F their CDFs. (Against the continuous
  law it would be infinite for Cauchy, whose E|X| is.)
* ``logit_kl`` = E_{y~P_Y} [(1/(L+1)) Σ_k KL(q(·|t<k) ‖ π(·|t<k))], the paper's per-token
  metric (it estimated it from 4 sampled paths), computed exactly over the whole trie.
  Targets q are zero off the trie, so each node's KL over the full vocabulary only needs
  π at the node's children.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from calbench.families import Target
from calbench.metrics.sampling import iqr
from calbench.space import Space
from calbench.stats import Summary, by_family, exact, family_means
from calbench.trie import Trie, build_trie


class TokenLogprobs(float):
    """A continuation's log-probability that also carries its per-token terms.

    ``calbench-hf`` and ``calbench-oracle`` answer lm-eval loglikelihood requests with
    these: lm-eval sees a float, and calbench's likelihood task can rebuild the trie
    edges to compute ``logit_kl``. Stock backends return plain floats.
    """

    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]
    support: dict[float, int] | None  # top-p support sizes of the next token after the continuation

    def __new__(
        cls, token_ids: Sequence[int], token_logprobs: Sequence[float], support: dict[float, int] | None = None
    ) -> TokenLogprobs:
        obj = super().__new__(cls, float(np.sum(token_logprobs)))
        obj.token_ids = tuple(int(t) for t in token_ids)
        obj.token_logprobs = tuple(float(x) for x in token_logprobs)
        obj.support = support
        return obj

    def __reduce__(self) -> tuple[Any, ...]:  # pickles across processes (multi-GPU gather)
        return (TokenLogprobs, (self.token_ids, self.token_logprobs, self.support))


def seq_kl(target: np.ndarray, logprob: np.ndarray) -> float:
    """KL(P_Y ‖ π_Y) in nats; terms with P_Y(y) = 0 contribute 0."""
    p = np.asarray(target, dtype=float)
    keep = p > 0
    return float(np.sum(p[keep] * (np.log(p[keep]) - np.asarray(logprob, dtype=float)[keep])))


def canonical_mass(logprob: np.ndarray) -> float:
    return float(np.exp(np.asarray(logprob, dtype=float)).sum())


def exact_w1(values: np.ndarray, target: np.ndarray, logprob: np.ndarray) -> float:
    """W1 between π_Y renormalised over Y and P_Y, on Y's sorted values."""
    x = np.asarray(values, dtype=float)
    order = np.argsort(x)
    lp = np.asarray(logprob, dtype=float)[order]
    model = np.exp(lp - lp.max())
    model /= model.sum()
    gap = np.cumsum(model) - np.cumsum(np.asarray(target, dtype=float)[order])
    return float(np.sum(np.abs(gap[:-1]) * np.diff(x[order])))


def node_kl(trie: Trie, edge_logprob: np.ndarray) -> np.ndarray:
    """KL(q(·|p) ‖ π(·|p)) at every node p (0 at leaves), q from the trie's masses."""
    q = trie.q()
    child = np.arange(1, trie.n_nodes)
    qc = q[child]
    terms = np.where(qc > 0, qc * (np.log(np.where(qc > 0, qc, 1.0)) - edge_logprob[child]), 0.0)
    return np.bincount(trie.parent[child], weights=terms, minlength=trie.n_nodes)


def logit_kl(trie: Trie, edge_logprob: np.ndarray, string_mass: np.ndarray | None = None) -> float:
    """The exact expectation over y ~ P_Y of the per-token mean KL along y's path.

    Σ_nodes KL(node) Σ_{y visits node} P_Y(y) / (L_y + 1) (``Trie.path_weights``), over the
    total mass; ``string_mass`` defaults to the trie's own masses at the strings' ends.
    """
    mass = trie.mass[trie.ends] if string_mass is None else np.asarray(string_mass, dtype=float)
    return float(np.dot(node_kl(trie, edge_logprob), trie.path_weights(mass)) / np.sum(mass))


METRICS = ("seq_kl", "canonical_mass", "exact_w1", "exact_w1_iqr")


def edge_logprobs(trie: Trie, token_logprobs: Sequence[Sequence[float]]) -> np.ndarray:
    """Per-node edge log-probabilities from per-string token log-probabilities (strings in trie order)."""
    nodes = trie.string_nodes()
    lp = np.zeros(nodes.shape)
    for i, row in enumerate(token_logprobs):
        lp[i, : len(row)] = row
    out = np.full(trie.n_nodes, np.nan)
    keep = nodes >= 0
    out[nodes[keep]] = lp[keep]
    return out


def score_choices(target: Target, space: Space, logprobs: Sequence[float], anchor: float) -> dict[str, Any]:
    """One prompt's likelihood record from lm-eval's answers to its choices.

    ``logprobs`` are log π of the whitespace plus each canonical answer plus terminator,
    ``anchor`` is log π of the whitespace alone (see ``calbench.harness.likelihood_docs``),
    so ``logprobs - anchor`` conditions on exactly the prompt the model samples from.
    """
    lp = np.asarray([float(x) for x in logprobs]) - float(anchor)
    w1 = exact_w1(space.values, space.masses, lp)
    scale = iqr(target)
    return {
        "family": target.family.name,
        "params": target.params,
        "seq_kl": seq_kl(space.masses, lp),
        "canonical_mass": canonical_mass(lp),
        "exact_w1": w1,
        "exact_w1_iqr": w1 / scale,
        "logit_kl": _logit_kl_from(space, logprobs, anchor),
    }


def _logit_kl_from(space: Space, logprobs: Sequence[float], anchor: float) -> float | None:
    """``logit_kl`` when the backend returned per-token terms, else ``None``."""
    if not isinstance(anchor, TokenLogprobs) or not all(isinstance(x, TokenLogprobs) for x in logprobs):
        return None
    skip = len(anchor.token_ids)
    answers = [x for x in logprobs if isinstance(x, TokenLogprobs)]
    if any(x.token_ids[:skip] != anchor.token_ids for x in answers):
        return None  # the whitespace merged into the answer's first token: no clean trie root
    trie = build_trie([x.token_ids[skip:] for x in answers], space.masses)
    edges = edge_logprobs(trie, [x.token_logprobs[skip:] for x in answers])
    return logit_kl(trie, edges)


def summarize(records: Sequence[dict[str, Any]]) -> Summary:
    """Mean over a family's prompts, then equal weight over families (exact: no standard errors).

    ``logit_kl`` is None without per-token terms: then undefined for the family and overall."""
    groups = by_family(records, lambda r: r["family"])
    families, overall = family_means(groups, [*METRICS, "logit_kl"], lambda r, m: exact(r[m]))
    return Summary(families, overall, len(records))
