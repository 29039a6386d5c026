"""The name-versus-law diagnostic: one law asked for twice, under a held-out family's name and under a
training family's name, wherever an exact identity between them exists.

A model that samples the training-named prompt far better than the held-out-named one has the
sampling but not the name: its failure on the held-out family is a failure to map the name to
the law (``calbench_numeric_names``; the generalization pages show both halves side by side).

The identities (each pair's two laws have one CDF on every answer; ``tests/test_name_pairs.py``):

* Bernoulli(p) = Binomial(n=1, p) at the held-out grid's p; also = Beta-Binomial(n=1, a, b) with
  a / (a + b) = p, and = Hypergeometric(M, K, N=1) with K / M = p;
* Chi(df=2) = Rayleigh(sigma=1);
* Weibull(k=1, lambda) = Exponential(rate 1 / lambda) = Gamma(alpha=1, beta=lambda) (the held-out
  Weibull grid has no k = 1: these are off it).

``NO_IDENTITY`` says why the other held-out families have no pair.
"""

from __future__ import annotations

from functools import cache

from calbench.families import Target, target_from_key

# (held-out name, training name): target keys.
PAIRS: tuple[tuple[str, str], ...] = (
    *((f"bernoulli(p={p})", f"binomial(n=1,p={p})") for p in ("0.1", "0.3", "0.5", "0.7", "0.9")),
    ("bernoulli(p=0.1)", "beta_binomial(n=1,alpha=1,beta=9)"),
    ("bernoulli(p=0.3)", "hypergeometric(M=10,K=3,N=1)"),
    ("bernoulli(p=0.5)", "beta_binomial(n=1,alpha=2,beta=2)"),
    ("bernoulli(p=0.7)", "hypergeometric(M=10,K=7,N=1)"),
    ("bernoulli(p=0.9)", "beta_binomial(n=1,alpha=9,beta=1)"),
    ("chi(df=2)", "rayleigh(sigma=1)"),
    ("weibull(k=1,lambda=0.5)", "exponential(lambda=2)"),
    ("weibull(k=1,lambda=1)", "exponential(lambda=1)"),
    ("weibull(k=1,lambda=2)", "exponential(lambda=0.5)"),
    ("weibull(k=1,lambda=1)", "gamma(alpha=1,beta=1)"),
    ("weibull(k=1,lambda=2)", "gamma(alpha=1,beta=2)"),
)

NO_IDENTITY: dict[str, str] = {
    "poisson": "a limit only (Binomial(n, lambda / n) as n grows, Skellam with mu2 = 0, which its domain excludes)",
    "maxwell": "Maxwell(a) is a times Chi(3), a held-out law itself; no training family has it as a member",
    "truncnorm": "the Gaussian is only its limit as the bounds go to infinity; calbench's bounds are finite",
}


@cache
def pairs() -> tuple[tuple[Target, Target], ...]:
    """Each identity as (the held-out-named target, the training-named target)."""
    return tuple((target_from_key(a), target_from_key(b)) for a, b in PAIRS)


def name_points() -> list[Target]:
    """The prompt set of ``calbench_numeric_names``: each held-out-named prompt once, in pair order,
    then every training-named prompt in pair order."""
    heldout = {a.key: a for a, _ in pairs()}
    return [*heldout.values(), *(b for _, b in pairs())]
