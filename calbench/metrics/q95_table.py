"""The calibration score's full-credit thresholds, computed once to a stated precision and kept here (data).

``CONTINUOUS[n]``: the 95th percentile of the ``pit_w1`` of n exact draws from any continuous law
(the PIT of exact draws is Uniform(0, 1) whatever the law), n = 1..50. ``INTEGER[(key, 50)]``: the
same for the integer laws of the evaluated prompt sets (the selected unseen and held-out prompts,
the training probe, interpolation and widened prompts) at the score's 50 answers per chunk; an
integer law's PIT is the non-randomized one of its lattice, so it depends on the law.

Each value is ``calbench.metrics.pit.simulated_q95``'s: seeded batches of 20,000 replicates until
the 95% Monte-Carlo interval's half-width is under 0.1% of the value, or 1,000,000 replicates.
``ERRORS`` keeps the half-width each entry reached: the continuous entries stopped at 1,000,000
replicates with 0.10-0.18% (a Monte-Carlo standard error under 0.1%), the integer ones with
0-0.28% (where an integer law's percentile sits between two of the few values its pit_w1 takes,
more replicates would not shrink it). 4,000 replicates, the threshold's former source, left an
error of 0.6%. Written by ``python -m calbench.metrics.q95_table`` (about an hour of one core);
``tests/test_pit.py`` checks the errors and recomputes a few entries with other seeds.
"""

from __future__ import annotations

CONTINUOUS: dict[int, float] = {
    1: 0.4756471225096258,
    2: 0.3932453700946992,
    3: 0.32916585922214686,
    4: 0.28586978948157277,
    5: 0.2566794519599469,
    6: 0.23477845526975788,
    7: 0.21778037020274027,
    8: 0.20422002808385928,
    9: 0.19254860864663428,
    10: 0.18278406514980777,
    11: 0.17444741305154873,
    12: 0.16707200759931543,
    13: 0.16080647890352714,
    14: 0.15507021515053296,
    15: 0.14955221654138628,
    16: 0.14500060128999304,
    17: 0.14108416422275608,
    18: 0.1368117252839282,
    19: 0.1332225698844313,
    20: 0.12988701957065701,
    21: 0.12674391647701708,
    22: 0.12386342544758519,
    23: 0.12117405144695087,
    24: 0.11863518088889143,
    25: 0.11606931506263121,
    26: 0.11387340830915942,
    27: 0.11199682210665457,
    28: 0.10991915768126279,
    29: 0.10770331639220733,
    30: 0.10610230548079444,
    31: 0.10437158366887385,
    32: 0.10271978322149765,
    33: 0.1010921395132979,
    34: 0.0996994275281384,
    35: 0.09826285580069583,
    36: 0.09672500090352797,
    37: 0.09548742332384728,
    38: 0.09431394823162689,
    39: 0.09316996618387183,
    40: 0.0920026941848635,
    41: 0.09070059217462065,
    42: 0.08963964992402848,
    43: 0.08865035912589107,
    44: 0.0876923244515791,
    45: 0.08660198224472705,
    46: 0.08577892493312768,
    47: 0.0847558150004983,
    48: 0.08395770702743521,
    49: 0.08295307186946804,
    50: 0.08233739351231784,
}
INTEGER: dict[tuple[str, int], float] = {
    ("binomial(n=25,p=0.5)", 50): 0.08105719330355853,
    ("geometric(p=0.125)", 50): 0.08120420861882478,
    ("negative_binomial(r=15,p=0.15)", 50): 0.08224482535046333,
    ("hypergeometric(M=100,K=50,N=20)", 50): 0.0806618066380919,
    ("skellam(mu1=10.5,mu2=10.5)", 50): 0.08162222895228437,
    ("beta_binomial(n=40,alpha=6.5,beta=6.5)", 50): 0.08191544540322743,
    ("bernoulli(p=0.1)", 50): 0.040000000000000036,
    ("bernoulli(p=0.5)", 50): 0.07,
    ("bernoulli(p=0.9)", 50): 0.04000000000000001,
    ("poisson(lambda=1)", 50): 0.07616996678954817,
    ("poisson(lambda=4)", 50): 0.08041652064832105,
    ("poisson(lambda=12)", 50): 0.08152508578297618,
    ("binomial(n=15,p=0.2)", 50): 0.07969899760553435,
    ("geometric(p=0.5)", 50): 0.07468750000000003,
    ("negative_binomial(r=8,p=0.2)", 50): 0.0821307638280248,
    ("hypergeometric(M=50,K=25,N=10)", 50): 0.07956976201039348,
    ("skellam(mu1=2.828,mu2=2.828)", 50): 0.08103647903340346,
    ("beta_binomial(n=20,alpha=1.581,beta=1.581)", 50): 0.08174350626025456,
    ("binomial(n=8,p=0.6796)", 50): 0.07903075135534011,
    ("binomial(n=11,p=0.7685)", 50): 0.07923578484919679,
    ("binomial(n=6,p=0.7962)", 50): 0.07714319258112193,
    ("geometric(p=0.5454)", 50): 0.07290977933153427,
    ("geometric(p=0.374)", 50): 0.07781798923376311,
    ("geometric(p=0.2113)", 50): 0.08030338531174205,
    ("negative_binomial(r=11.13,p=0.2108)", 50): 0.08206055980894147,
    ("negative_binomial(r=11.63,p=0.5164)", 50): 0.08160886506428222,
    ("negative_binomial(r=3.204,p=0.4506)", 50): 0.08079650197190989,
    ("hypergeometric(M=38,K=27,N=12)", 50): 0.07901839973325238,
    ("hypergeometric(M=44,K=33,N=6)", 50): 0.07707419581736358,
    ("hypergeometric(M=51,K=36,N=8)", 50): 0.07856100330106792,
    ("skellam(mu1=4.738,mu2=4.23)", 50): 0.08124210345316789,
    ("skellam(mu1=7.038,mu2=6.587)", 50): 0.08148391735243353,
    ("skellam(mu1=1.584,mu2=1.75)", 50): 0.08029073028282747,
    ("beta_binomial(n=13,alpha=4.525,beta=0.7303)", 50): 0.07820905624085668,
    ("beta_binomial(n=25,alpha=2.287,beta=0.5441)", 50): 0.08029506503006796,
    ("beta_binomial(n=17,alpha=3.776,beta=0.8)", 50): 0.08003188094357394,
    ("binomial(n=4,p=0.1706)", 50): 0.07344385302059074,
    ("binomial(n=38,p=0.07039)", 50): 0.07973081182844541,
    ("binomial(n=27,p=0.9006)", 50): 0.07959682291973731,
    ("geometric(p=0.1547)", 50): 0.08100726704175788,
    ("geometric(p=0.8621)", 50): 0.04933032819999999,
    ("geometric(p=0.9631)", 50): 0.021498871478825936,
    ("negative_binomial(r=12.19,p=0.9493)", 50): 0.0727651505997435,
    ("negative_binomial(r=19.07,p=0.5686)", 50): 0.08180291696720453,
    ("negative_binomial(r=7.059,p=0.09832)", 50): 0.08213663356234988,
    ("hypergeometric(M=115,K=15,N=4)", 50): 0.07057068977513689,
    ("hypergeometric(M=84,K=16,N=12)", 50): 0.07877473251629737,
    ("hypergeometric(M=31,K=25,N=18)", 50): 0.07811165845648613,
    ("skellam(mu1=0.8121,mu2=14.2)", 50): 0.08155040058353377,
    ("skellam(mu1=1.655,mu2=8.977)", 50): 0.0814237794185822,
    ("skellam(mu1=5.878,mu2=0.7631)", 50): 0.08113601585499093,
    ("beta_binomial(n=6,alpha=0.4773,beta=0.531)", 50): 0.0790450750008422,
    ("beta_binomial(n=9,alpha=1.672,beta=0.4685)", 50): 0.0779409733649939,
    ("beta_binomial(n=46,alpha=0.4184,beta=11.26)", 50): 0.0751048826748174,
}
ERRORS: dict[str, float] = {  # the relative Monte-Carlo error reached (95% interval half-width)
    "continuous 1": 0.000977,
    "continuous 2": 0.00106,
    "continuous 3": 0.00139,
    "continuous 4": 0.00146,
    "continuous 5": 0.00153,
    "continuous 6": 0.00157,
    "continuous 7": 0.00158,
    "continuous 8": 0.00159,
    "continuous 9": 0.00169,
    "continuous 10": 0.00162,
    "continuous 11": 0.00157,
    "continuous 12": 0.00162,
    "continuous 13": 0.00167,
    "continuous 14": 0.00173,
    "continuous 15": 0.00174,
    "continuous 16": 0.0017,
    "continuous 17": 0.00167,
    "continuous 18": 0.00177,
    "continuous 19": 0.0016,
    "continuous 20": 0.00164,
    "continuous 21": 0.00177,
    "continuous 22": 0.0016,
    "continuous 23": 0.00165,
    "continuous 24": 0.00158,
    "continuous 25": 0.00167,
    "continuous 26": 0.00166,
    "continuous 27": 0.0018,
    "continuous 28": 0.00169,
    "continuous 29": 0.00167,
    "continuous 30": 0.00163,
    "continuous 31": 0.00165,
    "continuous 32": 0.00166,
    "continuous 33": 0.00172,
    "continuous 34": 0.00163,
    "continuous 35": 0.00167,
    "continuous 36": 0.00161,
    "continuous 37": 0.00169,
    "continuous 38": 0.00163,
    "continuous 39": 0.00167,
    "continuous 40": 0.00171,
    "continuous 41": 0.0016,
    "continuous 42": 0.00164,
    "continuous 43": 0.0016,
    "continuous 44": 0.00159,
    "continuous 45": 0.00166,
    "continuous 46": 0.00168,
    "continuous 47": 0.00168,
    "continuous 48": 0.0016,
    "continuous 49": 0.00167,
    "continuous 50": 0.00171,
    "binomial(n=25,p=0.5) 50": 0.00174,
    "geometric(p=0.125) 50": 0.00171,
    "negative_binomial(r=15,p=0.15) 50": 0.00168,
    "hypergeometric(M=100,K=50,N=20) 50": 0.00162,
    "skellam(mu1=10.5,mu2=10.5) 50": 0.0018,
    "beta_binomial(n=40,alpha=6.5,beta=6.5) 50": 0.00177,
    "bernoulli(p=0.1) 50": 0,
    "bernoulli(p=0.5) 50": 0,
    "bernoulli(p=0.9) 50": 0,
    "poisson(lambda=1) 50": 0.00181,
    "poisson(lambda=4) 50": 0.0017,
    "poisson(lambda=12) 50": 0.00179,
    "binomial(n=15,p=0.2) 50": 0.00177,
    "geometric(p=0.5) 50": 0.000831,
    "negative_binomial(r=8,p=0.2) 50": 0.00175,
    "hypergeometric(M=50,K=25,N=10) 50": 0.00181,
    "skellam(mu1=2.828,mu2=2.828) 50": 0.00172,
    "beta_binomial(n=20,alpha=1.581,beta=1.581) 50": 0.00167,
    "binomial(n=8,p=0.6796) 50": 0.00175,
    "binomial(n=11,p=0.7685) 50": 0.00177,
    "binomial(n=6,p=0.7962) 50": 0.00105,
    "geometric(p=0.5454) 50": 0.00207,
    "geometric(p=0.374) 50": 0.00177,
    "geometric(p=0.2113) 50": 0.00175,
    "negative_binomial(r=11.13,p=0.2108) 50": 0.0016,
    "negative_binomial(r=11.63,p=0.5164) 50": 0.00174,
    "negative_binomial(r=3.204,p=0.4506) 50": 0.00163,
    "hypergeometric(M=38,K=27,N=12) 50": 0.00166,
    "hypergeometric(M=44,K=33,N=6) 50": 0.00199,
    "hypergeometric(M=51,K=36,N=8) 50": 0.00167,
    "skellam(mu1=4.738,mu2=4.23) 50": 0.00172,
    "skellam(mu1=7.038,mu2=6.587) 50": 0.00165,
    "skellam(mu1=1.584,mu2=1.75) 50": 0.00168,
    "beta_binomial(n=13,alpha=4.525,beta=0.7303) 50": 0.00171,
    "beta_binomial(n=25,alpha=2.287,beta=0.5441) 50": 0.00168,
    "beta_binomial(n=17,alpha=3.776,beta=0.8) 50": 0.00177,
    "binomial(n=4,p=0.1706) 50": 0.00275,
    "binomial(n=38,p=0.07039) 50": 0.00181,
    "binomial(n=27,p=0.9006) 50": 0.00167,
    "geometric(p=0.1547) 50": 0.00174,
    "geometric(p=0.8621) 50": 0,
    "geometric(p=0.9631) 50": 0,
    "negative_binomial(r=12.19,p=0.9493) 50": 0.000894,
    "negative_binomial(r=19.07,p=0.5686) 50": 0.00174,
    "negative_binomial(r=7.059,p=0.09832) 50": 0.0017,
    "hypergeometric(M=115,K=15,N=4) 50": 0.000415,
    "hypergeometric(M=84,K=16,N=12) 50": 0.00178,
    "hypergeometric(M=31,K=25,N=18) 50": 0.00206,
    "skellam(mu1=0.8121,mu2=14.2) 50": 0.00168,
    "skellam(mu1=1.655,mu2=8.977) 50": 0.00176,
    "skellam(mu1=5.878,mu2=0.7631) 50": 0.00178,
    "beta_binomial(n=6,alpha=0.4773,beta=0.531) 50": 0.00196,
    "beta_binomial(n=9,alpha=1.672,beta=0.4685) 50": 0.00175,
    "beta_binomial(n=46,alpha=0.4184,beta=11.26) 50": 0.00177,
}


def entries() -> tuple[dict[int, float], dict[tuple[str, int], float], dict[str, float]]:
    """Every entry and its error, freshly simulated (slow)."""
    from calbench.families import make_target
    from calbench.metrics.calibration import M_REF
    from calbench.metrics.pit import simulated_q95
    from calbench.param_ranges import prompt_set

    errors: dict[str, float] = {}
    gaussian = make_target("gaussian", {"mu": 0, "sigma": 1})
    continuous = {}
    for n in range(1, M_REF + 1):
        continuous[n], errors[f"continuous {n}"], _ = simulated_q95(gaussian, n)
    targets = [
        *prompt_set("unseen", "selected"),
        *prompt_set("heldout", "selected"),
        *prompt_set("train", "selected"),
        *prompt_set("interp"),
        *prompt_set("wide"),
    ]
    integer = {}
    for t in dict.fromkeys(t for t in targets if t.integer):
        integer[(t.key, M_REF)], errors[f"{t.key} {M_REF}"], _ = simulated_q95(t, M_REF)
        print(f"{t.key}: {integer[(t.key, M_REF)]:.6g} ± {errors[f'{t.key} {M_REF}']:.2%}", flush=True)
    return continuous, integer, errors


if __name__ == "__main__":
    from pathlib import Path

    continuous, integer, errors = entries()
    text = Path(__file__).read_text()
    head = text.split("CONTINUOUS: dict[int, float] = ", 1)[0]
    tail = text.split("\n\n\ndef entries()", 1)[1]
    body = "CONTINUOUS: dict[int, float] = {\n" + "".join(f"    {n}: {q!r},\n" for n, q in continuous.items()) + "}\n"
    body += "INTEGER: dict[tuple[str, int], float] = {\n"
    body += "".join(f"    ({k!r}, {n}): {q!r},\n" for (k, n), q in integer.items()) + "}\n"
    body += "ERRORS: dict[str, float] = {  # the relative Monte-Carlo error reached (95% interval half-width)\n"
    body += "".join(f"    {k!r}: {e:.3g},\n" for k, e in errors.items()) + "}\n"
    Path(__file__).write_text(head + body + "\n\ndef entries()" + tail)
