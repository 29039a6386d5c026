"""Writes ``calbench/data/prompt_sets.json``: the interpolation and widened prompt sets
(``calbench.param_ranges.INTERP`` and ``WIDE``), three prompts per training family, made by
``calbench.param_ranges.interp_candidates`` and ``wide_candidates`` (seed 0).

Run ``python tasks/scripts/generate_prompt_sets.py`` after adding a training family or changing a
training grid (a family missing from the file fails ``tests/test_param_ranges.py``), then bump the
``metadata.version`` of the tasks that read the sets (``calbench_numeric_interp``,
``calbench_numeric_wide``) and their golden hashes (``tests/test_prompts_golden.py``). The file is
committed; ``tests/test_param_ranges.py`` checks that it is what this script writes (a few minutes
of one core), as ``tests/test_protocols.py`` does for ``generate_protocol_tasks.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from calbench.families import FAMILIES, Family, Target
from calbench.param_ranges import PROMPT_SETS, interp_candidates, is_training_family, wide_candidates

MAKERS: dict[str, Callable[[Family], list[Target]]] = {"interp": interp_candidates, "wide": wide_candidates}


def _point(params: Mapping[str, float]) -> str:
    return json.dumps(dict(params))


def generated() -> str:
    """The file's text: per set, per training family (in ``FAMILIES`` order), one prompt's parameters a line."""
    families = [f for f in FAMILIES.values() if is_training_family(f)]
    parts = []
    for name, make in MAKERS.items():
        rows = [
            f'    "{f.name}": [\n' + ",\n".join(f"      {_point(t.params)}" for t in make(f)) + "\n    ]"
            for f in families
        ]
        parts.append(f'  "{name}": {{\n' + ",\n".join(rows) + "\n  }")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    PROMPT_SETS.write_text(generated())
    print(f"written: {PROMPT_SETS}")


if __name__ == "__main__":
    main()
