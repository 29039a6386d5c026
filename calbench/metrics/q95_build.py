"""Writes ``calbench.metrics.q95_table`` (the calibration score's full-credit thresholds): every
entry simulated afresh by ``calbench.metrics.pit.simulated_q95``.

    python -m calbench.metrics.q95_build          # every entry (about an hour of one core)
    python -m calbench.metrics.q95_build --few    # only the small-chunk entries (INTEGER at n < 50)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TABLE = Path(__file__).with_name("q95_table.py")

Entries = tuple[dict[int, float], dict[tuple[str, int], float], dict[str, float]]


def _integer_targets(*sets: tuple[str, ...]) -> list:
    from calbench.param_ranges import prompt_set

    return list(dict.fromkeys(t for args in sets for t in prompt_set(*args) if t.integer))


def few_entries() -> tuple[dict[tuple[str, int], float], dict[str, float]]:
    """The selected unseen and held-out prompts' integer laws at n = 1..49 (a prompt with fewer than
    50 valid answers is one chunk of that size), simulated to ``Q95_PRECISION_ELSE`` exactly as
    ``exact_q95`` would simulate them when asked: the table saves the time, not a value."""
    from calbench.metrics.calibration import M_REF
    from calbench.metrics.pit import Q95_PRECISION_ELSE, simulated_q95

    integer, errors = {}, {}
    for t in _integer_targets(("unseen", "selected"), ("heldout", "selected")):
        for n in range(1, M_REF):
            integer[(t.key, n)], errors[f"{t.key} {n}"], _ = simulated_q95(t, n, Q95_PRECISION_ELSE)
        print(f"{t.key}: n = 1..{M_REF - 1}", flush=True)
    return integer, errors


def entries() -> Entries:
    """Every entry and its error, freshly simulated (slow)."""
    from calbench.families import make_target
    from calbench.metrics.calibration import M_REF
    from calbench.metrics.pit import simulated_q95

    errors: dict[str, float] = {}
    gaussian = make_target("gaussian", {"mu": 0, "sigma": 1})
    continuous = {}
    for n in range(1, M_REF + 1):
        continuous[n], errors[f"continuous {n}"], _ = simulated_q95(gaussian, n)
    sets = [("unseen", "selected"), ("heldout", "selected"), ("train", "selected"), ("interp",), ("wide",)]
    integer = {}
    for t in _integer_targets(*sets):
        integer[(t.key, M_REF)], errors[f"{t.key} {M_REF}"], _ = simulated_q95(t, M_REF)
        print(f"{t.key}: {integer[(t.key, M_REF)]:.6g} ± {errors[f'{t.key} {M_REF}']:.2%}", flush=True)
    few, few_errors = few_entries()
    return continuous, integer | few, errors | few_errors


def with_few() -> Entries:
    """The committed table with its small-chunk entries simulated afresh."""
    from calbench.metrics.calibration import M_REF
    from calbench.metrics.q95_table import CONTINUOUS, ERRORS, INTEGER

    few, few_errors = few_entries()
    integer = {k: q for k, q in INTEGER.items() if k[1] == M_REF} | few
    errors = {k: e for k, e in ERRORS.items() if k.startswith("continuous ") or k.endswith(f" {M_REF}")}
    return dict(CONTINUOUS), integer, errors | few_errors


def write(table: Entries) -> None:
    """Rewrites the table's three dicts in place (its docstring kept), formatted as ruff formats them."""
    continuous, integer, errors = table
    text = TABLE.read_text()
    head = text.split("CONTINUOUS: dict[int, float] = ", 1)[0]
    body = "CONTINUOUS: dict[int, float] = {\n" + "".join(f"    {n}: {q!r},\n" for n, q in continuous.items()) + "}\n"
    body += "INTEGER: dict[tuple[str, int], float] = {\n"
    body += "".join(f"    ({json.dumps(k)}, {n}): {q!r},\n" for (k, n), q in integer.items()) + "}\n"
    body += "ERRORS: dict[str, float] = {  # the relative Monte-Carlo error reached (95% interval half-width)\n"
    body += "".join(f"    {json.dumps(k)}: {e:.3g},\n" for k, e in errors.items()) + "}\n"
    TABLE.write_text(head + body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m calbench.metrics.q95_build", description=__doc__.split("\n")[0])
    parser.add_argument("--few", action="store_true", help="only the small-chunk entries (INTEGER at n < 50)")
    write(with_few() if parser.parse_args(argv).few else entries())


if __name__ == "__main__":
    main()
