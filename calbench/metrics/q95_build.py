"""Writes ``calbench.metrics.q95_table`` (the calibration score's full-credit thresholds): every
entry simulated afresh by ``calbench.metrics.pit.simulated_q95`` (about an hour of one core).

    python -m calbench.metrics.q95_build
"""

from __future__ import annotations

from pathlib import Path

TABLE = Path(__file__).with_name("q95_table.py")


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


def write() -> None:
    """Rewrites the table's three dicts in place (its docstring kept)."""
    continuous, integer, errors = entries()
    text = TABLE.read_text()
    head = text.split("CONTINUOUS: dict[int, float] = ", 1)[0]
    body = "CONTINUOUS: dict[int, float] = {\n" + "".join(f"    {n}: {q!r},\n" for n, q in continuous.items()) + "}\n"
    body += "INTEGER: dict[tuple[str, int], float] = {\n"
    body += "".join(f"    ({k!r}, {n}): {q!r},\n" for (k, n), q in integer.items()) + "}\n"
    body += "ERRORS: dict[str, float] = {  # the relative Monte-Carlo error reached (95% interval half-width)\n"
    body += "".join(f"    {k!r}: {e:.3g},\n" for k, e in errors.items()) + "}\n"
    TABLE.write_text(head + body)


if __name__ == "__main__":
    write()
