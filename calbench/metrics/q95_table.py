"""The calibration score's full-credit thresholds, computed once to 0.1% and kept here (data).

``CONTINUOUS[n]``: the 95th percentile of the ``pit_w1`` of n exact draws from any continuous law
(the PIT of exact draws is Uniform(0, 1) whatever the law), n = 1..50. ``INTEGER[(key, 50)]``: the
same for the integer laws of the evaluated prompt sets (the selected unseen and held-out prompts,
the training probe, interpolation and widened prompts) at the score's 50 answers per chunk; an
integer law's PIT is the non-randomized one of its lattice, so it depends on the law.

Each value is ``calbench.metrics.pit.simulated_q95``'s: seeded batches of 100,000 replicates until
the 95% Monte-Carlo interval's half-width is under 0.1% of the value. Written by
``python -m calbench.metrics.q95_table`` (about 20 minutes of one core); ``tests/test_pit.py``
recomputes a few entries.
"""

from __future__ import annotations

CONTINUOUS: dict[int, float] = {}
INTEGER: dict[tuple[str, int], float] = {}


def entries() -> tuple[dict[int, float], dict[tuple[str, int], float]]:
    """Every entry, freshly simulated (slow)."""
    from calbench.families import make_target
    from calbench.metrics.calibration import M_REF
    from calbench.metrics.pit import simulated_q95
    from calbench.param_ranges import prompt_set

    gaussian = make_target("gaussian", {"mu": 0, "sigma": 1})
    continuous = {n: simulated_q95(gaussian, n)[0] for n in range(1, M_REF + 1)}
    targets = [
        *prompt_set("unseen", "selected"),
        *prompt_set("heldout", "selected"),
        *prompt_set("train", "selected"),
        *prompt_set("interp"),
        *prompt_set("wide"),
    ]
    integer = {(t.key, M_REF): simulated_q95(t, M_REF)[0] for t in dict.fromkeys(t for t in targets if t.integer)}
    return continuous, integer


if __name__ == "__main__":
    from pathlib import Path

    continuous, integer = entries()
    text = Path(__file__).read_text()
    head = text.split("CONTINUOUS: dict[int, float] = ", 1)[0]
    tail = text.split("\n\n\ndef entries()", 1)[1]
    body = "CONTINUOUS: dict[int, float] = {\n" + "".join(f"    {n}: {q!r},\n" for n, q in continuous.items()) + "}\n"
    body += "INTEGER: dict[tuple[str, int], float] = {\n"
    body += "".join(f"    ({k!r}, {n}): {q!r},\n" for (k, n), q in integer.items()) + "}\n"
    Path(__file__).write_text(head + body + "\n\ndef entries()" + tail)
