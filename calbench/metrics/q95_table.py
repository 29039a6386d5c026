"""The calibration score's full-credit thresholds, computed once to a stated precision and kept here (data).

``CONTINUOUS[n]``: the 95th percentile of the ``pit_w1`` of n exact draws from any continuous law
(the PIT of exact draws is Uniform(0, 1) whatever the law), n = 1..50. ``INTEGER[(key, 50)]``: the
same for the integer laws of the evaluated prompt sets (the selected unseen and held-out prompts,
the training probe, interpolation and widened prompts) at the score's 50 answers per chunk; an
integer law's PIT is the non-randomized one of its lattice, so it depends on the law.
``INTEGER[(key, n)]`` for n = 1..49: the selected unseen and held-out prompts' integer laws at
every smaller chunk (a prompt with fewer than 50 valid answers is one chunk of that size), each the
value ``exact_q95`` would otherwise simulate when asked, to 0.5% (``Q95_PRECISION_ELSE``, the same
seeds): these entries save the leaderboard's render minutes, not change a number.

Each value is ``calbench.metrics.pit.simulated_q95``'s: seeded batches of 20,000 replicates until
the 95% Monte-Carlo interval's half-width is under 0.1% of the value, or 1,000,000 replicates.
``ERRORS`` keeps the half-width each entry reached: the continuous entries stopped at 1,000,000
replicates with 0.10-0.18% (a Monte-Carlo standard error under 0.1%), the integer ones with
0-0.28% (where an integer law's percentile sits between two of the few values its pit_w1 takes,
more replicates would not shrink it). 4,000 replicates, the threshold's former source, left an
error of 0.6%.

The entries are data, ``calbench/data/q95_table.json``, written by
``python tasks/scripts/generate_q95_table.py`` (about an hour of one core; ``--few``: the n < 50
entries only, minutes); this module reads them. ``tests/test_pit.py`` checks the errors,
recomputes a sample of entries as the script does (the same seeds: the same numbers) and a few
with other seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

TABLE = Path(__file__).parents[1] / "data" / "q95_table.json"
Entries = tuple[dict[int, float], dict[tuple[str, int], float], dict[str, float]]


def read(path: Path = TABLE) -> Entries:
    """``CONTINUOUS``, ``INTEGER`` and ``ERRORS`` from the table's file (the script's layout: per
    integer law its entries by n)."""
    data = json.loads(path.read_text())
    continuous = {int(n): q for n, q in data["continuous"].items()}
    integer = {(key, int(n)): q for key, by_n in data["integer"].items() for n, q in by_n.items()}
    return continuous, integer, dict(data["errors"])


CONTINUOUS, INTEGER, ERRORS = read()
