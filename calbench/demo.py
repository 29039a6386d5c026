"""``calbench demo``: the quick numeric task on SmolLM2-135M-Instruct and the two reference systems."""

from __future__ import annotations

import sys
from pathlib import Path

from calbench import model_catalogue, results_tables, runner

TASK = "calbench_numeric_quick"


def run(output: Path, num_samples: int | None = None, batch_size: int = 64) -> str:
    """Evaluate the three systems (lm-eval outputs under ``output``) and return the per-family table."""
    model_dir = model_catalogue.model_path(model_catalogue.DEFAULT_MODEL)
    systems = [
        ("SmolLM2-135M-Instruct", "hf", f"pretrained={model_dir},dtype=float32", True),
        ("oracle", "calbench-oracle", "", False),
        ("collapsed", "calbench-collapsed", "", False),
    ]
    rows = []
    for name, model, model_args, chat in systems:
        print(f"\n== {name}: {TASK}", file=sys.stderr, flush=True)
        results = runner.evaluate(
            model,
            [TASK],
            model_args=model_args,
            num_samples=num_samples,
            apply_chat_template=chat,
            output_path=output / name,
            batch_size=batch_size,
            device="cpu" if model == "hf" else None,
        )
        rows.append((name, results["results"][TASK]))
    n = num_samples or 10
    head = f"\ncalbench demo: {TASK} (42 prompts, {n} samples each), results under {output}"
    return head + "\n" + results_tables.numeric_table(rows)
