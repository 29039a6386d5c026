"""Writes the protocol tasks' YAML (``tasks/calbench_numeric_{unseen,heldout,quick}_<protocol>.yaml``)
from ``calbench.protocols.PROTOCOLS``: run ``python tasks/scripts/generate_protocol_tasks.py`` after
changing a protocol's token budget or samples per response, then bump the tasks'
``metadata.version`` if the prompts changed (``tests/test_prompts_golden.py``). The files are
committed; ``tests/test_protocols.py`` checks that they are what this script writes (as lm-eval's
``lm_eval/tasks/mmlu/_generate_configs.py`` writes MMLU's). It lives in a folder of its own: the
wheel ships tasks/ as the package ``calbench.tasks`` (its YAML only), and every ``.py`` beside the
YAML would ship as one of its modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

from calbench.protocols import PROTOCOLS, VARIANTS

TASKS = Path(__file__).resolve().parent.parent
# Each protocol in a few words, for the files' first comment line.
ABOUT = {
    "batch": "K = 10 numbers per request, every valid item a sample; serial-dependence diagnostics",
    "seeded": "a fresh random seed string in every request, reproducible from the task seed",
    "ssot": "String Seed of Thought: a random string first, the number on a final 'Answer:' line",
    "verbalized": "k = 5 candidates with probabilities per response; one seeded draw from each list",
}
# The prompt sets: split, what the comment calls them, samples per prompt, tag.
SETS = {
    "unseen": ("unseen", "the 24 unseen-parameter prompts:", 1000, "calbench_protocols"),
    "heldout": ("heldout", "the 18 held-out-family prompts:", 1000, "calbench_protocols"),
    "quick": (
        "all",
        "every family's selected points (42 prompts), for tests and the demo:",
        10,
        "calbench_protocols_quick",
    ),
}
VERSION = 1  # of every protocol task's prompts (tests/test_prompts_golden.py pins them)


def requests(protocol: str, samples: int) -> str:
    """How a prompt's samples are asked for, in words."""
    items = PROTOCOLS[protocol].items
    n = -(-samples // items)
    if items == 1:
        return f"{n} requests"
    return f"{n} request{'s' if n != 1 else ''} of {items} numbers"


def task_yaml(name: str, protocol: str) -> str:
    """The YAML of the task of prompt set ``name`` under ``protocol``."""
    split, described, samples, tag = SETS[name]
    p = PROTOCOLS[protocol]
    return (
        f"# The {protocol} protocol ({ABOUT[protocol]}) on {described}\n"
        f"# {samples} samples per prompt ({requests(protocol, samples)}). See calbench/protocols.py.\n"
        f"task: calbench_numeric_{name}{p.task_suffix}\n"
        f"tag: [calbench, {tag}]\n"
        "include: _numeric_sampling.yaml\n"
        "class: !function calbench.harness.ProtocolTask\n"
        "dataset_kwargs:\n"
        f"  calbench_split: {split}\n"
        "  calbench_points: selected\n"
        f"  calbench_protocol: {protocol}\n"
        f"repeats: {-(-samples // p.items)}\n"
        "generation_kwargs:\n"
        "  until: []\n"
        "  do_sample: true\n"
        "  temperature: 1.0\n"
        "  top_p: 1.0\n"
        "  top_k: 0\n"
        "  repetition_penalty: 1.0  # overrides a model's generation_config.json (stock hf and vLLM apply it)\n"
        f"  max_gen_toks: {p.max_gen_toks}\n"
        "metadata:\n"
        f"  version: {VERSION}\n"
    )


def generated() -> dict[str, str]:
    """File name -> content of every protocol task."""
    return {
        f"calbench_numeric_{name}{PROTOCOLS[protocol].task_suffix}.yaml": task_yaml(name, protocol)
        for protocol in VARIANTS
        for name in SETS
    }


def main(folder: Path = TASKS) -> int:
    for file_name, text in generated().items():
        (folder / file_name).write_text(text)
        print(f"written: {folder / file_name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
