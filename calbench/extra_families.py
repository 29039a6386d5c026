"""Training-only families: laws that none of the 30 families is, to train on many more families
than the paper's 24 (``calbench train --extra-families K``) and to hold some back as a
validation set of families the run never trains on (``VALIDATION``, ``calbench_numeric_validation``).

Every row is a ``Family`` like the 30 (``calbench.laws``): a display name and parameters in the
one prompt template, an exact law (a ``scipy.stats`` law, or one built by
``calbench.law_transforms``), its kind, and a ``train`` box (each axis from its smallest to its
largest value) that ``calbench.param_ranges.draw`` draws fresh parameters from, as for the 24
training families. The rows come from five generators:

* named scipy laws outside the 30 (Log-Logistic, Gompertz, Yule-Simon, ...);
* shifts of the positive training laws (``shift`` > 0: a shifted law is never its base);
* truncations of training laws to [lower, upper] (bounds at drawn quantiles of the base);
* roundings of continuous training laws to the nearest integer;
* two-component mixtures of training laws (weight ``w`` of the first).

**Never a held-out law.** No row is a held-out family or contains one as a member: no
Exponential, Rayleigh, half-normal, Maxwell, Chi, Weibull, Poisson or Bernoulli law, and no
truncated Gaussian. Left out for that reason: Nakagami (m = 1.5 is a Maxwell), the half-normal and
folded normal (Chi with df = 1), the generalized gamma and exponentiated Weibull (they contain
Weibull, Chi and Maxwell), the Rice law (Rayleigh at nu = 0), the generalized Pareto (an
Exponential at c = 0), Exponential and Rayleigh transforms, Gamma-Gamma mixtures (two
Exponentials), the rounded Beta and the truncated Gaussian. Limits (a Poisson is a limit of
Binomials) and near misses are kept away by distance: ``param_ranges.draw`` redraws any draw
within ``param_ranges.HELDOUT_MARGIN`` (in W1 / IQR) of a held-out prompt.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from calbench.law_transforms import mixture, rounded, truncated
from calbench.laws import Domain, Family, Grid, Param, ppf
from calbench.stats import seed_for

Spec = tuple[str, Domain, tuple[float, float]]  # a parameter: its name, domain and box


@dataclass(frozen=True)
class Base:
    """A training law a transform starts from: its display name, parameters (name, domain, box)
    and scipy law."""

    name: str
    display: str
    kind: str
    params: tuple[tuple[str, Domain, tuple[float, float]], ...]
    law: Callable[..., Any]

    def suffixed(self, suffix: str) -> tuple[tuple[str, Domain, tuple[float, float]], ...]:
        return tuple((n + suffix, d, box) for n, d, box in self.params)

    def build(self, values: Mapping[str, float], suffix: str = "", **kw: float) -> Any:
        return self.law(*(values[n + suffix] for n, _, _ in self.params), **kw)


LOC, SCALE = (-2.0, 2.0), (0.5, 2.0)
EXTRA_WIDEN = 2.0  # a run draws an extra family from its box widened 2x about its centre, whatever its --widen


def _loc_scale(name: str, display: str, law: Any, scale: str = "sigma", loc: str = "mu") -> Base:
    return Base(name, display, "cont", ((loc, "real", LOC), (scale, "positive", SCALE)), lambda m, s, **kw: law(m, s))


BASES = {
    b.name: b
    for b in (
        _loc_scale("gaussian", "Gaussian", stats.norm),
        _loc_scale("laplace", "Laplace", stats.laplace, "b"),
        _loc_scale("logistic", "Logistic", stats.logistic, "s"),
        _loc_scale("cauchy", "Cauchy", stats.cauchy, "gamma", "x0"),
        _loc_scale("gumbel", "Gumbel", stats.gumbel_r, "beta"),
        Base(
            "lognormal",
            "LogNormal",
            "cont",
            (("mu", "real", (-1.0, 1.5)), ("sigma", "positive", (0.25, 1.25))),
            lambda mu, sigma, loc=0.0: stats.lognorm(s=sigma, scale=math.exp(mu), loc=loc),
        ),
        Base(
            "gamma",
            "Gamma",
            "cont",
            (("alpha", "positive", (1.5, 5.0)), ("beta", "positive", (1.0, 5.0))),
            lambda a, b, loc=0.0: stats.gamma(a, scale=b, loc=loc),
        ),
        Base(
            "chi_square",
            "Chi-Square",
            "cont",
            (("nu", "positive", (3.0, 20.0)),),
            lambda nu, loc=0.0: stats.chi2(nu, loc=loc),
        ),
        Base(
            "f_distribution",
            "F",
            "cont",
            (("d1", "positive", (3.0, 10.0)), ("d2", "positive", (5.0, 20.0))),
            lambda d1, d2, loc=0.0: stats.f(d1, d2, loc=loc),
        ),
        Base(
            "pareto",
            "Pareto",
            "cont",
            (("alpha", "positive", (2.0, 5.0)), ("xm", "positive", (0.5, 2.0))),
            lambda a, xm, loc=0.0: stats.pareto(a, scale=xm, loc=loc),
        ),
        Base(
            "lomax",
            "Lomax",
            "cont",
            (("alpha", "positive", (1.5, 4.0)), ("lambda", "positive", (0.5, 3.0))),
            lambda a, lam, loc=0.0: stats.lomax(a, scale=lam, loc=loc),
        ),
        Base(
            "inverse_gaussian",
            "Inverse Gaussian",
            "cont",
            (("mu", "positive", (0.5, 3.0)), ("lambda", "positive", (0.5, 5.0))),
            lambda mu, lam, loc=0.0: stats.invgauss(mu / lam, scale=lam, loc=loc),
        ),
        Base("student_t", "Student's t", "cont", (("nu", "positive", (2.5, 10.0)),), lambda nu: stats.t(nu)),
        Base(
            "binomial",
            "Binomial",
            "int",
            (("n", "count", (5.0, 20.0)), ("p", "prob", (0.2, 0.8))),
            lambda n, p, loc=0: stats.binom(n, p, loc=loc),
        ),
        Base(
            "geometric", "Geometric", "int", (("p", "open_prob", (0.2, 0.8)),), lambda p, loc=0: stats.geom(p, loc=loc)
        ),
        Base(
            "negative_binomial",
            "Negative Binomial",
            "int",
            (("r", "positive", (3.0, 12.0)), ("p", "prob", (0.2, 0.8))),
            lambda r, p, loc=0: stats.nbinom(r, p, loc=loc),
        ),
        Base(
            "skellam",
            "Skellam",
            "int",
            (("mu1", "positive", (1.0, 8.0)), ("mu2", "positive", (1.0, 8.0))),
            lambda m1, m2: stats.skellam(m1, m2),
        ),
        Base(
            "beta_binomial",
            "Beta-Binomial",
            "int",
            (("n", "count", (10.0, 30.0)), ("alpha", "positive", (0.5, 5.0)), ("beta", "positive", (0.5, 5.0))),
            lambda n, a, b, loc=0: stats.betabinom(n, a, b, loc=loc),
        ),
    )
}


def _family(
    name: str,
    display: str,
    kind: str,
    params: tuple[tuple[str, Domain, tuple[float, float]], ...],
    law: Callable[..., Any],
    derive: Callable[..., dict[str, float]] | None = None,
    axes: tuple[tuple[str, tuple[float, float]], ...] | None = None,
    check: Callable[..., str | None] | None = None,
) -> Family:
    """A row: its parameters' domains, the law of their values, the box drawn from (the parameters'
    own boxes, or ``axes`` mapped onto the parameters by ``derive``)."""
    box = axes if axes is not None else tuple((n, b) for n, _, b in params)
    names = tuple(n for n, _, _ in params)
    return Family(
        name,
        display,
        "int" if kind == "int" else "cont",
        3,
        tuple(Param(n, d) for n, d, _ in params),
        lambda **values: law(*(values[n] for n in names)),
        {"train": Grid(box, derive)},
        (),
        check,
    )


def _named() -> list[Family]:
    """Named scipy laws that none of the 30 families is (their boxes: typical, finite-variance shapes)."""
    pos: Domain = "positive"
    real: Domain = "real"
    posint: Domain = "posint"

    def simple(name: str, display: str, params: Any, law: Any, kind: str = "cont") -> Family:
        return _family(name, display, kind, params, law)

    def ordered(lo: str, hi: str) -> Callable[..., str | None]:
        return lambda **p: None if p[lo] < p[hi] else f"parameter '{hi}' must be > {lo}, got {lo}={p[lo]}, {hi}={p[hi]}"

    span = (("lower", (-3.0, 1.0)), ("span", (1.0, 5.0)))

    def spanned(**p: float) -> dict[str, float]:
        rest = {k: v for k, v in p.items() if k not in ("lower", "span")}
        return {**rest, "lower": p["lower"], "upper": p["lower"] + p["span"]}

    bounds: tuple[Spec, ...] = (("lower", real, LOC), ("upper", real, LOC))
    return [
        simple("half_cauchy", "Half-Cauchy", (("scale", pos, SCALE),), lambda s: stats.halfcauchy(scale=s)),
        _family(
            "arcsine",
            "Arcsine",
            "cont",
            bounds,
            lambda a, b: stats.arcsine(loc=a, scale=b - a),
            spanned,
            span,
            ordered("lower", "upper"),
        ),
        simple(
            "semicircle",
            "Wigner Semicircle",
            (("mu", real, LOC), ("r", pos, SCALE)),
            lambda m, r: stats.semicircular(m, r),
        ),
        simple(
            "raised_cosine",
            "Raised Cosine",
            (("mu", real, LOC), ("s", pos, SCALE)),
            lambda m, s: stats.cosine(m, s / math.pi),
        ),
        simple(
            "hyperbolic_secant",
            "Hyperbolic Secant",
            (("mu", real, LOC), ("s", pos, SCALE)),
            lambda m, s: stats.hypsecant(m, s),
        ),
        simple(
            "reversed_gumbel",
            "Reversed Gumbel",
            (("mu", real, LOC), ("beta", pos, SCALE)),
            lambda m, b: stats.gumbel_l(m, b),
        ),
        simple(
            "log_logistic",
            "Log-Logistic",
            (("alpha", pos, (0.5, 3.0)), ("beta", pos, (2.0, 8.0))),
            lambda a, b: stats.fisk(b, scale=a),
        ),
        simple(
            "inverse_gamma",
            "Inverse Gamma",
            (("alpha", pos, (2.5, 8.0)), ("beta", pos, (0.5, 5.0))),
            lambda a, b: stats.invgamma(a, scale=b),
        ),
        simple(
            "frechet",
            "Frechet",
            (("alpha", pos, (2.0, 6.0)), ("s", pos, (0.5, 3.0))),
            lambda a, s: stats.invweibull(a, scale=s),
        ),
        simple("burr", "Burr", (("c", pos, (1.5, 4.0)), ("k", pos, (1.0, 4.0))), lambda c, k: stats.burr12(c, k)),
        simple(
            "dagum",
            "Dagum",
            (("a", pos, (2.0, 6.0)), ("p", pos, (0.5, 2.0)), ("b", pos, (0.5, 3.0))),
            lambda a, p, b: stats.burr(a, p, scale=b),
        ),
        simple(
            "skew_normal",
            "Skew Normal",
            (("xi", real, LOC), ("omega", pos, SCALE), ("alpha", real, (1.0, 3.0))),
            lambda x, o, a: stats.skewnorm(a, x, o),
        ),
        simple(
            "generalized_normal",
            "Generalized Normal",
            (("mu", real, LOC), ("alpha", pos, SCALE), ("beta", pos, (1.2, 4.0))),
            lambda m, a, b: stats.gennorm(b, m, a),
        ),
        simple(
            "generalized_logistic",
            "Generalized Logistic",
            (("mu", real, LOC), ("s", pos, SCALE), ("c", pos, (0.3, 3.0))),
            lambda m, s, c: stats.genlogistic(c, m, s),
        ),
        simple("moyal", "Moyal", (("mu", real, LOC), ("sigma", pos, SCALE)), lambda m, s: stats.moyal(m, s)),
        simple(
            "johnson_su",
            "Johnson's SU",
            (("gamma", real, LOC), ("delta", pos, (0.8, 3.0)), ("xi", real, LOC), ("lambda", pos, SCALE)),
            lambda g, d, x, lam: stats.johnsonsu(g, d, x, lam),
        ),
        simple(
            "beta_prime",
            "Beta Prime",
            (("alpha", pos, (2.0, 8.0)), ("beta", pos, (3.0, 8.0))),
            lambda a, b: stats.betaprime(a, b),
        ),
        _family(
            "log_uniform",
            "Log-Uniform",
            "cont",
            (("a", pos, (0.1, 1.0)), ("b", pos, (2.0, 20.0))),
            lambda a, b: stats.loguniform(a, b),
            check=ordered("a", "b"),
        ),
        simple(
            "asymmetric_laplace",
            "Asymmetric Laplace",
            (("mu", real, LOC), ("b", pos, SCALE), ("kappa", pos, (0.3, 3.0))),
            lambda m, b, k: stats.laplace_asymmetric(k, m, b),
        ),
        simple(
            "noncentral_t",
            "Noncentral t",
            (("nu", pos, (3.0, 10.0)), ("delta", real, (-2.0, 2.0))),
            lambda n, d: stats.nct(n, d),
        ),
        simple(
            "log_gamma", "Log-Gamma", (("c", pos, (0.5, 5.0)), ("mu", real, LOC)), lambda c, m: stats.loggamma(c, loc=m)
        ),
        _family(
            "bradford",
            "Bradford",
            "cont",
            (("c", pos, (0.5, 10.0)), *bounds),
            lambda c, a, b: stats.bradford(c, loc=a, scale=b - a),
            spanned,
            (("c", (0.5, 10.0)), *span),
            ordered("lower", "upper"),
        ),
        simple(
            "power_function",
            "Power Function",
            (("alpha", pos, (0.3, 4.0)), ("b", pos, (1.0, 5.0))),
            lambda a, b: stats.powerlaw(a, scale=b),
        ),
        simple(
            "discrete_laplace",
            "Discrete Laplace",
            (("mu", "count", (0.0, 10.0)), ("a", pos, (0.2, 1.5))),
            lambda m, a: stats.dlaplace(a, loc=m),
            "int",
        ),
        simple(
            "zipf",
            "Zipf",
            (("s", pos, (1.2, 3.0)), ("n", "posint", (5.0, 50.0))),
            lambda s, n: stats.zipfian(s, n),
            "int",
        ),
        simple("logarithmic", "Logarithmic", (("p", "prob", (0.3, 0.95)),), lambda p: stats.logser(p), "int"),
        simple("yule_simon", "Yule-Simon", (("rho", pos, (1.5, 6.0)),), lambda r: stats.yulesimon(r), "int"),
        _family(
            "discrete_uniform",
            "Discrete Uniform",
            "int",
            (("a", "count", (0.0, 10.0)), ("b", "count", (4.0, 30.0))),
            lambda a, b: stats.randint(a, b + 1),
            check=lambda a, b: None if b - a >= 3 else f"parameter 'b' must be >= a + 3, got a={a}, b={b}",
        ),
        _family(
            "boltzmann",
            "Boltzmann",
            "int",
            (("lambda", pos, (0.2, 1.5)), ("N", posint, (4.0, 20.0))),
            lambda lam, n: stats.boltzmann(lam, n),
        ),
    ]


SHIFTED = (
    "lognormal",
    "gamma",
    "chi_square",
    "f_distribution",
    "pareto",
    "lomax",
    "inverse_gaussian",
    "binomial",
    "geometric",
    "negative_binomial",
    "beta_binomial",
)


def _shifted(base: Base) -> Family:
    """``base`` moved right by a positive ``shift`` (an integer for an integer law)."""
    shift: Spec = ("shift", "posint", (1.0, 10.0)) if base.kind == "int" else ("shift", "positive", (0.5, 5.0))
    return _family(
        f"shifted_{base.name}",
        f"Shifted {base.display}",
        base.kind,
        (*base.params, shift),
        lambda *v: base.law(*v[:-1], loc=v[-1]),
    )


TRUNCATED_TWO_SIDED = ("laplace", "logistic", "cauchy", "gumbel", "binomial", "skellam", "beta_binomial")
TRUNCATED_ABOVE = ("lognormal", "gamma", "chi_square", "lomax", "geometric", "negative_binomial")
Q_LOWER, Q_UPPER = (0.02, 0.3), (0.7, 0.98)  # the quantiles of the base the bounds are drawn at
Q_LOWER_INT, Q_UPPER_INT = (0.02, 0.15), (0.85, 0.98)  # an integer law's: at least 3 values kept, mostly


def _truncated(base: Base, two_sided: bool) -> Family:
    """``base`` conditioned on [lower, upper] (on [support's start, upper] if one-sided); the box
    draws the bounds at quantiles of the base, so every draw keeps a real share of its mass."""
    names = [n for n, _, _ in base.params]
    sides = ("lower", "upper") if two_sided else ("upper",)
    params = (*base.params, *((s, "real", (0.0, 1.0)) for s in sides))  # drawn through their quantiles
    axes = ((n, box) for n, _, box in base.params)
    low, high = (Q_LOWER_INT, Q_UPPER_INT) if base.kind == "int" else (Q_LOWER, Q_UPPER)
    quantiles = (("q_lower", low), ("q_upper", high)) if two_sided else (("q_upper", high),)

    def derive(**p: float) -> dict[str, float]:
        law = base.build(p)
        out = {n: p[n] for n in names}
        for side in sides:
            value = float(ppf(law, [p[f"q_{side}"]])[0])
            out[side] = round(value) if base.kind == "int" else value
        return out

    def law(*v: float) -> Any:
        values = dict(zip([*names, *sides], v, strict=True))
        return truncated(base.build(values), values.get("lower", -math.inf), values["upper"])

    def check(**p: float) -> str | None:
        if two_sided and not p["lower"] < p["upper"]:
            return f"parameter 'upper' must be > lower, got lower={p['lower']}, upper={p['upper']}"
        if base.kind == "int" and p["upper"] - p.get("lower", base.build(p).support()[0]) < 2:
            return "the truncation must keep at least 3 values"
        return None

    name = f"truncated_{base.name}" if two_sided else f"truncated_{base.name}_above"
    return _family(name, f"Truncated {base.display}", base.kind, params, law, derive, (*axes, *quantiles), check)


ROUNDED = {  # continuous bases rounded to integers, with boxes wide enough for rounding to keep a shape
    "gaussian": ((-5.0, 5.0), (1.0, 5.0)),
    "laplace": ((-5.0, 5.0), (1.0, 5.0)),
    "logistic": ((-5.0, 5.0), (1.0, 4.0)),
    "cauchy": ((-5.0, 5.0), (1.0, 4.0)),
    "gumbel": ((-5.0, 5.0), (1.0, 5.0)),
    "lognormal": ((0.5, 2.5), (0.25, 1.0)),
    "gamma": ((1.5, 5.0), (1.0, 5.0)),
    "chi_square": ((3.0, 20.0),),
    "inverse_gaussian": ((2.0, 10.0), (2.0, 20.0)),
    "lomax": ((1.5, 4.0), (2.0, 10.0)),
    "pareto": ((2.0, 5.0), (1.0, 5.0)),
}


def _rounded(base: Base, boxes: tuple[tuple[float, float], ...]) -> Family:
    params = tuple((n, d, box) for (n, d, _), box in zip(base.params, boxes, strict=True))
    return _family(f"rounded_{base.name}", f"Rounded {base.display}", "int", params, lambda *v: rounded(base.law(*v)))


MIXED_CONTINUOUS = (
    "gaussian",
    "laplace",
    "logistic",
    "cauchy",
    "gumbel",
    "lognormal",
    "gamma",
    "inverse_gaussian",
    "lomax",
    "pareto",
)
MIXED_INTEGER = ("binomial", "geometric", "negative_binomial", "skellam", "beta_binomial")
NO_SELF_MIXTURE = frozenset({"gamma"})  # two Gamma(1) parts of one rate are an Exponential: a Weibull


def _mixture(first: Base, second: Base) -> Family:
    same = first is second
    display = f"{first.display} Mixture" if same else f"{first.display}-{second.display} Mixture"
    one, two = first.suffixed("1"), second.suffixed("2")
    params = (("w", "prob", (0.2, 0.8)), *one, *two)
    names = [n for n, _, _ in params]

    def law(*v: float) -> Any:
        values = dict(zip(names, v, strict=True))
        return mixture(first.build(values, "1"), second.build(values, "2"), values["w"])

    name = f"{first.name}_mixture" if same else f"{first.name}_{second.name}_mixture"
    return _family(name, display, first.kind, params, law)


def _mixtures() -> list[Family]:
    out = []
    for group in (MIXED_CONTINUOUS, MIXED_INTEGER):
        for a, b in itertools.combinations_with_replacement(group, 2):
            if a == b and a in NO_SELF_MIXTURE:
                continue
            out.append(_mixture(BASES[a], BASES[b]))
    return out


def _all() -> list[Family]:
    rows = _named()
    rows += [_shifted(BASES[b]) for b in SHIFTED]
    rows += [_truncated(BASES[b], True) for b in TRUNCATED_TWO_SIDED]
    rows += [_truncated(BASES[b], False) for b in TRUNCATED_ABOVE]
    rows += [_rounded(BASES[b], boxes) for b, boxes in ROUNDED.items()]
    return rows + _mixtures()


EXTRA_FAMILIES: dict[str, Family] = {f.name: f for f in _all()}

# Held back: never trained on, scored at every checkpoint (calbench_numeric_validation) to choose
# checkpoints on families the run has not seen, as the held-out six are: three named laws (two
# continuous, one integer), a shift, a rounding and a mixture.
VALIDATION: tuple[str, ...] = (
    "asymmetric_laplace",
    "half_cauchy",
    "discrete_laplace",
    "shifted_binomial",
    "rounded_lognormal",
    "laplace_gumbel_mixture",
)
# The validation prompts, three per validation family: made by param_ranges.validation_candidates
# (seed 0) and frozen here, pinned by tests/test_prompts_golden.py (tests/test_extra_families.py
# checks that the candidates still give them).
VALIDATION_POINTS: dict[str, tuple[Mapping[str, float], ...]] = {
    "asymmetric_laplace": (
        {"mu": -0.7992, "b": 0.6931, "kappa": 2.422},
        {"mu": 0.8159, "b": 1.567, "kappa": 1.458},
        {"mu": -0.7983, "b": 1.324, "kappa": 1.08},
    ),
    "half_cauchy": ({"scale": 0.5906}, {"scale": 1.058}, {"scale": 1.536}),
    "discrete_laplace": ({"mu": 1, "a": 0.2275}, {"mu": 4, "a": 0.211}, {"mu": 1, "a": 0.3836}),
    "shifted_binomial": (
        {"n": 7, "p": 0.4752, "shift": 10},
        {"n": 17, "p": 0.6878, "shift": 10},
        {"n": 18, "p": 0.6897, "shift": 5},
    ),
    "rounded_lognormal": ({"mu": 2.021, "sigma": 0.9479}, {"mu": 1.4, "sigma": 0.8526}, {"mu": 2.342, "sigma": 0.5983}),
    "laplace_gumbel_mixture": (
        {"w": 0.4628, "mu1": -1.745, "b1": 0.9588, "mu2": -0.4754, "beta2": 1.761},
        {"w": 0.4164, "mu1": 1.426, "b1": 1.226, "mu2": -1.907, "beta2": 0.5727},
        {"w": 0.318, "mu1": 0.3203, "b1": 1.845, "mu2": -1.941, "beta2": 1.062},
    ),
}


def training_order() -> tuple[str, ...]:
    """The extra families a run trains on first: ``--extra-families K`` takes the first K. A fixed
    shuffle of every row but the validation families, so that each prefix mixes the five kinds."""
    names = sorted(n for n in EXTRA_FAMILIES if n not in VALIDATION)
    rng = np.random.default_rng(seed_for("extra family order"))
    return tuple(names[i] for i in rng.permutation(len(names)))
