"""Writes ``calbench/data/q95_table.json`` (read by ``calbench.metrics.q95_table``): the calibration
score's full-credit thresholds, every entry simulated afresh by ``calbench.metrics.pit.simulated_q95``.

    python tasks/scripts/generate_q95_table.py          # every entry (about an hour of one core)
    python tasks/scripts/generate_q95_table.py --few    # only the small-chunk entries (INTEGER at n < 50)

Run it after adding a family with integer laws or changing an evaluated prompt set (a missing
entry fails ``tests/test_pit.py``). ``tests/test_pit.py`` recomputes a sample of the committed
entries with this script's ``simulate`` (the same seeds: the same numbers) and checks that the file
is what ``text`` writes from its own entries.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from calbench.families import Target, make_target, target_from_key
from calbench.metrics.calibration import M_REF
from calbench.metrics.pit import Q95_PRECISION_ELSE, simulated_q95
from calbench.metrics.q95_table import TABLE, Entries, read
from calbench.param_ranges import prompt_set

CONTINUOUS = "continuous"  # an entry of any continuous law (the PIT of exact draws is uniform whatever the law)
SETS = [("unseen", "selected"), ("heldout", "selected"), ("train", "selected"), ("interp",), ("wide",)]
FEW_SETS = [("unseen", "selected"), ("heldout", "selected")]  # their integer laws at every chunk size below M_REF


def _integer_targets(*sets: tuple[str, ...]) -> list[Target]:
    return list(dict.fromkeys(t for args in sets for t in prompt_set(*args) if t.integer))


def simulate(key: str, n: int) -> tuple[float, float]:
    """(q95, its relative error) of one entry: ``key`` a target's key or ``CONTINUOUS``; an integer
    law below ``M_REF`` answers is simulated to ``Q95_PRECISION_ELSE``, as ``exact_q95`` would."""
    if key == CONTINUOUS:
        q, error, _ = simulated_q95(make_target("gaussian", {"mu": 0, "sigma": 1}), n)
    elif n < M_REF:
        q, error, _ = simulated_q95(target_from_key(key), n, Q95_PRECISION_ELSE)
    else:
        q, error, _ = simulated_q95(target_from_key(key), n)
    return q, error


def few_entries() -> tuple[dict[tuple[str, int], float], dict[str, float]]:
    """The selected unseen and held-out prompts' integer laws at n = 1..49 (a prompt with fewer than
    50 valid answers is one chunk of that size): the table saves the time, not a value."""
    integer, errors = {}, {}
    for t in _integer_targets(*FEW_SETS):
        for n in range(1, M_REF):
            integer[(t.key, n)], errors[f"{t.key} {n}"] = simulate(t.key, n)
        print(f"{t.key}: n = 1..{M_REF - 1}", flush=True)
    return integer, errors


def entries() -> Entries:
    """Every entry and its error, freshly simulated (slow)."""
    errors: dict[str, float] = {}
    continuous = {}
    for n in range(1, M_REF + 1):
        continuous[n], errors[f"continuous {n}"] = simulate(CONTINUOUS, n)
    integer = {}
    for t in _integer_targets(*SETS):
        integer[(t.key, M_REF)], errors[f"{t.key} {M_REF}"] = simulate(t.key, M_REF)
        print(f"{t.key}: {integer[(t.key, M_REF)]:.6g} ± {errors[f'{t.key} {M_REF}']:.2%}", flush=True)
    few, few_errors = few_entries()
    return continuous, integer | few, errors | few_errors


def with_few() -> Entries:
    """The committed table with its small-chunk entries simulated afresh."""
    continuous, committed, committed_errors = read()
    few, few_errors = few_entries()
    integer = {k: q for k, q in committed.items() if k[1] == M_REF} | few
    errors = {k: e for k, e in committed_errors.items() if k.startswith("continuous ") or k.endswith(f" {M_REF}")}
    return continuous, integer, errors | few_errors


def text(table: Entries) -> str:
    """The file's text: one entry a line; the integer entries grouped by law, by n; each error to
    3 significant digits (the precision it states)."""
    continuous, integer, errors = table
    by_law: dict[str, dict[int, float]] = {}
    for (key, n), q in integer.items():
        by_law.setdefault(key, {})[n] = q
    lines = ['  "continuous": {', ",\n".join(f'    "{n}": {q!r}' for n, q in continuous.items()), "  },"]
    lines.append('  "integer": {')
    laws = [
        f"    {json.dumps(key)}: {{\n" + ",\n".join(f'      "{n}": {q!r}' for n, q in sorted(qs.items())) + "\n    }"
        for key, qs in by_law.items()
    ]
    lines += [",\n".join(laws), "  },", '  "errors": {']
    lines += [",\n".join(f"    {json.dumps(k)}: {float(f'{e:.3g}')!r}" for k, e in errors.items()), "  }"]
    return "{\n" + "\n".join(lines) + "\n}\n"


def write(table: Entries, path: Path = TABLE) -> None:
    path.write_text(text(table))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python tasks/scripts/generate_q95_table.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--few", action="store_true", help="only the small-chunk entries (INTEGER at n < 50)")
    write(with_few() if parser.parse_args(argv).few else entries())
    print(f"written: {TABLE}")


if __name__ == "__main__":
    main()
