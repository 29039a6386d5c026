"""The 30 distribution families: one table, one row per family.

Every fact calbench knows about a family lives in its row of ``FAMILIES``: the display
name used in prompts, the parameter names in prompt order with their domains, the
mapping onto a frozen ``scipy.stats`` law, the kind (integer or continuous), the
complexity tier, the parameter grids of each split and the selected evaluation points.

A ``Target`` is one family with concrete parameter values. It is the only way to get a
law: ``Target`` validates the parameters first, so nothing downstream ever sees an
invalid law.
"""

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from scipy import stats

from calbench.extra_families import EXTRA_FAMILIES
from calbench.laws import (
    SIGNIFICANT_DIGITS,
    Domain,
    Family,
    Grid,
    InvalidParametersError,
    Kind,
    Param,
    Split,
    Target,
    format_value,
    geom,
    grid,
    lin,
    ppf,
    round_params,
    round_sig,
)

# Re-exported: the building blocks live in calbench.laws, the tables here and in calbench.extra_families.
__all__ = [
    "ALL_FAMILIES",
    "EXTRA_FAMILIES",
    "FAMILIES",
    "SIGNIFICANT_DIGITS",
    "Domain",
    "Family",
    "Grid",
    "InvalidParametersError",
    "Kind",
    "Param",
    "Split",
    "Target",
    "format_value",
    "geom",
    "get_family",
    "grid",
    "lin",
    "make_target",
    "ppf",
    "round_params",
    "round_sig",
    "split_points",
    "target_from_key",
    "training_probe",
]


def _uniform_check(a: float, b: float) -> str | None:
    return None if a < b else f"parameter 'b' must be > a, got a={a}, b={b}"


def _triangular_check(a: float, c: float, b: float) -> str | None:
    if not a < b:
        return f"parameter 'b' must be > a, got a={a}, b={b}"
    return None if a <= c <= b else f"parameter 'c' (mode) must lie in [a, b], got a={a}, c={c}, b={b}"


def _hypergeom_check(M: int, K: int, N: int) -> str | None:  # noqa: N803 - the prompt's names
    if K > M:
        return f"parameter 'K' must be <= M, got K={K}, M={M}"
    return None if N <= M else f"parameter 'N' must be <= M, got N={N}, M={M}"


def _truncnorm_check(mu: float, sigma: float, lower: float, upper: float) -> str | None:
    return None if lower < upper else f"parameter 'upper' must be > lower, got lower={lower}, upper={upper}"


def _truncnorm(mu: float, sigma: float, lower: float, upper: float) -> Any:
    return stats.truncnorm(a=(lower - mu) / sigma, b=(upper - mu) / sigma, loc=mu, scale=sigma)


BINOMIAL_P = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.8)
LOCATION_SCALE_TRAIN = grid(mu=lin(-2, 2, 11), s=geom(0.5, 2, 11))
LOCATION_SCALE_UNSEEN = grid(mu=lin(2.5, 4, 6), s=geom(2.25, 3.5, 6))


def _location_scale(scale: str, which: Grid) -> Grid:
    """Laplace, logistic and Gumbel share one grid; only the scale's name differs."""
    return Grid(which.axes, lambda mu, s: {"mu": mu, scale: s})


def _real(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n) for n in names)


def _pos(*names: str) -> tuple[Param, ...]:
    return tuple(Param(n, "positive") for n in names)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        # ---- 24 training families -------------------------------------------------------
        Family(
            "uniform",
            "Uniform",
            "cont",
            1,
            _real("a", "b"),
            lambda a, b: stats.uniform(loc=a, scale=b - a),
            {
                "train": Grid(
                    (("a", lin(-5, 2, 11)), ("width", lin(1, 5, 11))), lambda a, width: {"a": a, "b": a + width}
                ),
                "unseen": Grid(
                    (("a", lin(2.5, 4.5, 6)), ("width", lin(5.5, 8, 6))), lambda a, width: {"a": a, "b": a + width}
                ),
            },
            ({"a": 3.5, "b": 10.5},),
            _uniform_check,
        ),
        Family(
            "gaussian",
            "Gaussian",
            "cont",
            1,
            (Param("mu"), Param("sigma", "positive")),
            lambda mu, sigma: stats.norm(loc=mu, scale=sigma),
            {
                "train": grid(mu=lin(-2, 2, 11), sigma=geom(0.5, 2, 11)),
                "unseen": grid(mu=lin(2.5, 4, 6), sigma=geom(2.25, 3.5, 6)),
            },
            ({"mu": 3.5, "sigma": 3},),
        ),
        Family(
            "beta",
            "Beta",
            "cont",
            2,
            _pos("alpha", "beta"),
            lambda alpha, beta: stats.beta(alpha, beta),
            {
                "train": grid(alpha=geom(0.5, 5, 11), beta=geom(0.5, 5, 11)),
                "unseen": grid(alpha=geom(5.5, 8, 6), beta=geom(5.5, 8, 6)),
            },
            ({"alpha": 7, "beta": 7},),
        ),
        Family(
            "binomial",
            "Binomial",
            "int",
            2,
            (Param("n", "count"), Param("p", "prob")),
            lambda n, p: stats.binom(n, p),
            {"train": grid(n=(5, 10, 15, 20), p=BINOMIAL_P), "unseen": grid(n=(25, 30), p=(0.25, 0.4, 0.5, 0.6, 0.75))},
            ({"n": 25, "p": 0.5},),
        ),
        Family(
            "exponential",
            "Exponential",
            "cont",
            2,
            _pos("lambda"),
            lambda **p: stats.expon(scale=1 / p["lambda"]),  # lambda is the rate
            {"train": grid(**{"lambda": geom(0.5, 5, 25)}), "unseen": grid(**{"lambda": geom(5.5, 8, 12)})},
            ({"lambda": 7},),
        ),
        Family(
            "geometric",
            "Geometric",
            "int",
            2,
            (Param("p", "open_prob"),),
            lambda p: stats.geom(p),  # trials up to and including the first success: 1, 2, ...
            {
                "train": grid(p=(0.2, 0.225, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75, 0.775, 0.8)),
                "unseen": grid(p=(0.05, 0.075, 0.1, 0.125, 0.15, 0.85, 0.875, 0.9, 0.925, 0.95)),
            },
            ({"p": 0.125},),
        ),
        Family(
            "negative_binomial",
            "Negative Binomial",
            "int",
            2,
            (Param("r", "positive"), Param("p", "open_prob")),
            lambda r, p: stats.nbinom(r, p),  # failures before the r-th success: 0, 1, ...
            {
                "train": grid(r=(3, 5, 8, 12), p=BINOMIAL_P),
                "unseen": grid(r=(15, 20), p=(0.1, 0.15, 0.2, 0.8, 0.85, 0.9)),
            },
            ({"r": 15, "p": 0.15},),
        ),
        Family(
            "lognormal",
            "LogNormal",
            "cont",
            2,
            (Param("mu"), Param("sigma", "positive")),
            lambda mu, sigma: stats.lognorm(s=sigma, scale=math.exp(mu)),
            {
                "train": grid(mu=lin(-1, 1.5, 11), sigma=geom(0.25, 1.25, 11)),
                "unseen": grid(mu=lin(1.75, 3, 6), sigma=geom(1.5, 2.25, 6)),
            },
            ({"mu": 2.5, "sigma": 2},),
        ),
        Family(
            "triangular",
            "Triangular",
            "cont",
            2,
            _real("a", "c", "b"),
            lambda a, c, b: stats.triang(c=(c - a) / (b - a), loc=a, scale=b - a),
            {
                "train": Grid(
                    (("a", lin(-3, 1, 5)), ("width", lin(1, 5, 5)), ("mode", (0.1, 0.3, 0.5, 0.7, 0.9))),
                    lambda a, width, mode: {"a": a, "c": a + mode * width, "b": a + width},
                ),
                "unseen": Grid(
                    (("a", lin(1.5, 3.5, 3)), ("width", lin(5.5, 8, 3)), ("mode", (0.1, 0.5, 0.9))),
                    lambda a, width, mode: {"a": a, "c": a + mode * width, "b": a + width},
                ),
            },
            ({"a": 2.5, "c": 6, "b": 9.5},),
            _triangular_check,
        ),
        Family(
            "rayleigh",
            "Rayleigh",
            "cont",
            2,
            _pos("sigma"),
            lambda sigma: stats.rayleigh(scale=sigma),
            {"train": grid(sigma=geom(0.5, 2, 25)), "unseen": grid(sigma=geom(2.25, 3.5, 12))},
            ({"sigma": 3},),
        ),
        Family(
            "cauchy",
            "Cauchy",
            "cont",
            3,
            (Param("x0"), Param("gamma", "positive")),
            lambda x0, gamma: stats.cauchy(loc=x0, scale=gamma),
            {
                "train": grid(x0=lin(-2, 2, 11), gamma=geom(0.5, 2, 11)),
                "unseen": grid(x0=lin(2.5, 4, 6), gamma=geom(2.25, 3.5, 6)),
            },
            ({"x0": 3.5, "gamma": 3},),
        ),
        Family(
            "student_t",
            "Student's t",
            "cont",
            3,
            _pos("nu"),
            lambda nu: stats.t(df=nu),
            {
                "train": grid(nu=(2.5, 2.75, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10)),
                "unseen": grid(nu=(10.5, 12, 14, 16, 18, 20)),
            },
            ({"nu": 16},),
        ),
        Family(
            "chi_square",
            "Chi-Square",
            "cont",
            3,
            _pos("nu"),
            lambda nu: stats.chi2(df=nu),
            {
                "train": grid(nu=(2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20)),
                "unseen": grid(nu=(21, 24, 28, 32, 36, 40)),
            },
            ({"nu": 32},),
        ),
        Family(
            "f_distribution",
            "F",
            "cont",
            3,
            _pos("d1", "d2"),
            lambda d1, d2: stats.f(dfn=d1, dfd=d2),
            {"train": grid(d1=(3, 5, 7, 10), d2=(5, 10, 15, 20)), "unseen": grid(d1=(12, 15), d2=(24, 30))},
            ({"d1": 12, "d2": 24},),
        ),
        Family(
            "gamma",
            "Gamma",
            "cont",
            3,
            _pos("alpha", "beta"),
            lambda alpha, beta: stats.gamma(alpha, scale=beta),  # beta is the scale, not the rate
            {
                "train": grid(alpha=geom(1, 5, 11), beta=geom(1, 5, 11)),
                "unseen": grid(alpha=geom(5.5, 8, 6), beta=geom(5.5, 8, 6)),
            },
            ({"alpha": 7, "beta": 7},),
        ),
        Family(
            "laplace",
            "Laplace",
            "cont",
            3,
            (Param("mu"), Param("b", "positive")),
            lambda mu, b: stats.laplace(loc=mu, scale=b),
            {
                "train": _location_scale("b", LOCATION_SCALE_TRAIN),
                "unseen": _location_scale("b", LOCATION_SCALE_UNSEEN),
            },
            ({"mu": 3.5, "b": 3},),
        ),
        Family(
            "logistic",
            "Logistic",
            "cont",
            3,
            (Param("mu"), Param("s", "positive")),
            lambda mu, s: stats.logistic(loc=mu, scale=s),
            {
                "train": _location_scale("s", LOCATION_SCALE_TRAIN),
                "unseen": _location_scale("s", LOCATION_SCALE_UNSEEN),
            },
            ({"mu": 3.5, "s": 3},),
        ),
        Family(
            "pareto",
            "Pareto",
            "cont",
            3,
            _pos("alpha", "xm"),
            lambda alpha, xm: stats.pareto(b=alpha, scale=xm),
            {
                "train": grid(alpha=(2, 2.25, 2.5, 2.75, 3, 3.5, 4, 4.5, 5), xm=geom(0.5, 2, 11)),
                "unseen": grid(alpha=(5.5, 6, 6.5, 7, 8), xm=geom(2.5, 4, 6)),
            },
            ({"alpha": 6.5, "xm": 3.5},),
        ),
        Family(
            "hypergeometric",
            "Hypergeometric",
            "int",
            3,
            (Param("M", "posint"), Param("K", "count"), Param("N", "count")),
            lambda M, K, N: stats.hypergeom(M, K, N),  # noqa: N803 - population, successes, draws
            {
                "train": Grid(
                    (("M", (30, 50, 80)), ("N", (5, 10, 15)), ("f", (0.2, 0.35, 0.5, 0.65, 0.8))),
                    lambda M, N, f: {"M": M, "K": round(M * f), "N": N},  # noqa: N803
                ),
                "unseen": Grid(
                    (("M", (100, 120)), ("N", (20, 25)), ("f", (0.2, 0.5, 0.8))),
                    lambda M, N, f: {"M": M, "K": round(M * f), "N": N},  # noqa: N803
                ),
            },
            ({"M": 100, "K": 50, "N": 20},),
            _hypergeom_check,
        ),
        Family(
            "gumbel",
            "Gumbel",
            "cont",
            3,
            (Param("mu"), Param("beta", "positive")),
            lambda mu, beta: stats.gumbel_r(loc=mu, scale=beta),
            {
                "train": _location_scale("beta", LOCATION_SCALE_TRAIN),
                "unseen": _location_scale("beta", LOCATION_SCALE_UNSEEN),
            },
            ({"mu": 3.5, "beta": 3},),
        ),
        Family(
            "skellam",
            "Skellam",
            "int",
            3,
            _pos("mu1", "mu2"),
            lambda mu1, mu2: stats.skellam(mu1, mu2),
            {
                "train": grid(mu1=geom(1, 8, 11), mu2=geom(1, 8, 11)),
                "unseen": grid(mu1=geom(8.5, 12, 6), mu2=geom(8.5, 12, 6)),
            },
            ({"mu1": 10.5, "mu2": 10.5},),
        ),
        Family(
            "beta_binomial",
            "Beta-Binomial",
            "int",
            3,
            (Param("n", "count"), *_pos("alpha", "beta")),
            lambda n, alpha, beta: stats.betabinom(n, alpha, beta),
            {
                "train": grid(n=(10, 20, 30), alpha=geom(0.5, 5, 5), beta=geom(0.5, 5, 5)),
                "unseen": grid(n=(40, 50), alpha=geom(5.5, 8, 3), beta=geom(5.5, 8, 3)),
            },
            ({"n": 40, "alpha": 6.5, "beta": 6.5},),
        ),
        Family(
            "lomax",
            "Lomax",
            "cont",
            3,
            _pos("alpha", "lambda"),
            lambda **p: stats.lomax(c=p["alpha"], scale=p["lambda"]),
            {
                "train": grid(alpha=geom(1.5, 4, 11), **{"lambda": geom(0.5, 3, 11)}),
                "unseen": grid(alpha=geom(4.5, 7, 6), **{"lambda": geom(3.5, 5, 6)}),
            },
            ({"alpha": 6, "lambda": 4.5},),
        ),
        Family(
            "inverse_gaussian",
            "Inverse Gaussian",
            "cont",
            3,
            _pos("mu", "lambda"),
            lambda **p: stats.invgauss(mu=p["mu"] / p["lambda"], scale=p["lambda"]),  # mu = mean, lambda = shape
            {
                "train": grid(mu=geom(0.5, 3, 11), **{"lambda": geom(0.5, 5, 11)}),
                "unseen": grid(mu=geom(3.5, 6, 6), **{"lambda": geom(5.5, 8, 6)}),
            },
            ({"mu": 5, "lambda": 7},),
        ),
        # ---- 6 held-out families, never trained on --------------------------------------
        Family(
            "bernoulli",
            "Bernoulli",
            "int",
            1,
            (Param("p", "prob"),),
            lambda p: stats.bernoulli(p),
            {"heldout": grid(p=(0.1, 0.3, 0.5, 0.7, 0.9))},
            ({"p": 0.1}, {"p": 0.5}, {"p": 0.9}),
        ),
        Family(
            "poisson",
            "Poisson",
            "int",
            2,
            _pos("lambda"),
            lambda **p: stats.poisson(p["lambda"]),
            {"heldout": grid(**{"lambda": geom(1, 12, 17)})},
            ({"lambda": 1}, {"lambda": 4}, {"lambda": 12}),
        ),
        Family(
            "weibull",
            "Weibull",
            "cont",
            3,
            _pos("k", "lambda"),
            lambda **p: stats.weibull_min(c=p["k"], scale=p["lambda"]),
            {"heldout": grid(k=geom(0.5, 3, 6), **{"lambda": geom(0.5, 3, 6)})},
            ({"k": 0.5, "lambda": 0.5}, {"k": 1.5, "lambda": 1.5}, {"k": 3, "lambda": 3}),
        ),
        Family(
            "maxwell",
            "Maxwell",
            "cont",
            2,
            _pos("scale"),
            lambda scale: stats.maxwell(scale=scale),
            {"heldout": grid(scale=(0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5))},
            ({"scale": 0.75}, {"scale": 1.5}, {"scale": 2.5}),
        ),
        Family(
            "chi",
            "Chi",
            "cont",
            3,
            _pos("df"),
            lambda df: stats.chi(df),
            {"heldout": grid(df=(1.5, 2, 3, 4, 5, 7, 10, 14, 20))},
            ({"df": 2}, {"df": 5}, {"df": 10}),
        ),
        Family(
            "truncnorm",
            "Truncated Normal",
            "cont",
            2,
            (Param("mu"), Param("sigma", "positive"), Param("lower"), Param("upper")),
            _truncnorm,
            {"heldout": grid(mu=(0, 1), sigma=(1, 1.5), lower=(-2, -1), upper=(1, 2))},
            (
                {"mu": 0, "sigma": 1, "lower": -1, "upper": 1},
                {"mu": 0, "sigma": 1, "lower": -2, "upper": 2},
                {"mu": 1, "sigma": 1.5, "lower": -1, "upper": 2},
            ),
            _truncnorm_check,
        ),
    ]
}


# Every family a prompt can name, in report order: the 30 of the suite, then the training-only
# extra families (calbench.extra_families: drawn for training, held back for validation).
ALL_FAMILIES: dict[str, Family] = {**FAMILIES, **EXTRA_FAMILIES}


def get_family(name: str) -> Family:
    """The family called ``name`` (one of the 30, or a training-only extra family); a clear error
    listing the 30 known names otherwise."""
    try:
        return ALL_FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown family {name!r}; known families: {', '.join(FAMILIES)}") from None


def make_target(family: str, params: Mapping[str, float]) -> Target:
    """Validate ``params`` for ``family`` and return the target law (raises ``InvalidParametersError``)."""
    return get_family(family).target(params)


@lru_cache(maxsize=4096)
def target_from_key(key: str) -> Target:
    """The target a ``Target.key`` names, e.g. ``gaussian(mu=3.5,sigma=3)`` (a clear error otherwise).
    One object per key (a target is immutable; its law is built once, on first use)."""
    family, paren, inner = key.partition("(")
    try:
        if not (paren and inner.endswith(")")):
            raise ValueError("expected family(name=value,...)")
        params = {k: float(v) for k, v in (kv.split("=") for kv in inner[:-1].split(",") if kv)}
    except ValueError as err:
        raise InvalidParametersError(f"{key!r} is not a target key ({err})") from None
    return make_target(family, params)


def split_points(split: Split, selection: Literal["selected", "full"] = "full") -> list[Target]:
    """Every target of a split, family by family in table order.

    ``selection="selected"`` gives the paper's selected evaluation points (24 unseen, 18
    held-out); for the training split, one prompt per training family (``training_probe``).
    """
    if selection == "selected":
        if split == "train":
            return training_probe()
        return [t for f in FAMILIES.values() if f.eval_split == split for t in f.selected_points()]
    return [t for f in FAMILIES.values() for t in f.points(split)]


def training_probe() -> list[Target]:
    """One training prompt per training family (24): the middle point of its training grid, in
    table order. The training split's counterpart of the unseen split's selected points: an
    adapter that samples these no better than the unseen ones does not fit its own training
    prompts yet (underfitting), one that samples them well and the unseen ones badly does not
    carry its fit past them (generalization)."""
    out = []
    for family in FAMILIES.values():
        points = family.points("train")
        if points:
            out.append(points[len(points) // 2])
    return out
