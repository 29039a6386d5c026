"""``calbench demo``: what calbench measures, and what calbench's training does, in one table.

Five systems answer ``calbench_numeric_quick`` (the 42 selected prompts of the 30 families)
with ``calbench-hf``: SmolLM2-135M-Instruct, the best soft-target and the best hard-target LoRA
adapter calbench trained on it by the leaderboard's score (committed under
``leaderboards/adapters``: soft at 60 steps of 16, hard at the paper's soft budget), an exact sampler and
one collapsed on each law's median. Each gets 50 samples per prompt, the calibration score's
reference size, so the score is the leaderboard's (``calbench.metrics.calibration``); KS is run
on the first 50 valid answers (the leaderboard's KS@100 needs 100).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from calbench import eval_report, evaluation, lm_eval_io, model_catalogue
from calbench.metrics import calibration, prompt_scores
from calbench.metrics.catalog import arrow
from calbench.stats import fmt
from calbench.task_names import QUICK

TASK = QUICK
SAMPLES = calibration.M_REF  # samples per prompt: the score's reference size
KS_N = SAMPLES  # KS on the first 50 valid answers of each prompt
ADAPTERS = Path(__file__).resolve().parents[1] / "leaderboards" / "adapters"
ADAPTER_ROWS = {
    "soft": "smollm2-135m-instruct-soft",
    "hard": "smollm2-135m-instruct-hard-wide-long",
}  # the rows whose adapters it shows: each method's best score on the leaderboard
EXAMPLE_TARGET = "binomial(n=25,p=0.5)"  # whose raw answers the demo prints


@dataclass(frozen=True)
class System:
    name: str
    model: str
    model_args: str = ""
    chat: bool = False


def systems(adapters: Path = ADAPTERS) -> list[System]:
    """SmolLM2-135M-Instruct and each committed adapter found under ``adapters``, then the references."""
    base = f"pretrained={model_catalogue.model_path(model_catalogue.DEFAULT_MODEL)},dtype=float32"
    found = [System("SmolLM2-135M-Instruct", "calbench-hf", base, chat=True)]
    for method, row in ADAPTER_ROWS.items():
        folder = adapters / row
        if (folder / "adapter_config.json").is_file():
            found.append(System(f"+ {method} adapter", "calbench-hf", f"{base},peft={folder}", chat=True))
        else:
            print(f"calbench demo: no {method} adapter at {folder}: left out", file=sys.stderr)
    return [*found, System("oracle (exact)", "calbench-oracle"), System("collapsed", "calbench-collapsed")]


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class Outcome:
    """One system's run: its lm-eval task results, prompts (family -> samples) and raw answers."""

    name: str
    task_results: Mapping[str, Any]
    rows: Mapping[str, Sequence[calibration.Prompt]]
    examples: Sequence[str]


def evaluate(system: System, output: Path, num_samples: int, batch_size: int) -> Outcome:
    print(f"\n== {system.name}: {TASK}, {num_samples} samples per prompt", file=sys.stderr, flush=True)
    results = evaluation.evaluate(
        system.model,
        [TASK],
        model_args=system.model_args,
        num_samples=num_samples,
        apply_chat_template=system.chat,
        output_path=output / re.sub(r"[^A-Za-z0-9.-]+", "_", system.name).strip("_"),
        batch_size=batch_size,
        device=_device() if system.model == "calbench-hf" else None,
    )
    samples = results["samples"][TASK]
    example = next((s for s in samples if s["doc"]["target"] == EXAMPLE_TARGET), samples[0])
    rows = prompt_scores.prompt_rows(lm_eval_io.prompt_values(samples, TASK))
    return Outcome(system.name, results["results"][TASK], rows, example["resps"][0][:2])


def headline(outcomes: Sequence[Outcome], ks_n: int = KS_N) -> str:
    """The demo's table: valid rate, pit_w1, excess W1/IQR median, KS@N and the score."""
    headers = [
        "system",
        f"valid_rate {arrow('valid_rate')}",
        f"pit_w1 {arrow('pit_w1')}",
        f"excess_w1_iqr median {arrow('excess_w1_iqr')}",
        f"KS@{ks_n} {arrow('ks_at_n')}",
        f"score {arrow('calibration_score')}",
    ]
    table = []
    for o in outcomes:
        q = prompt_scores.sample_quality(o.rows, ks_n)
        median = eval_report.overall_metric(o.task_results, "excess_w1_iqr_median")
        cells = [q["valid_rate"], q["pit_w1"], median, q["ks_at_n"], q["calibration_score"]]
        table.append([o.name, *(fmt(c) for c in cells)])
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True)


def _short(text: str, width: int = 48) -> str:
    flat = repr(text)
    return flat if len(flat) <= width else flat[: width - 4] + "...'"


def examples(outcomes: Sequence[Outcome]) -> str:
    lines = [f"two raw answers per system to the {EXAMPLE_TARGET} prompt:"]
    lines += [f"  {o.name:<22} " + "   ".join(_short(t) for t in o.examples) for o in outcomes]
    return "\n".join(lines)


def reading(outcomes: Sequence[Outcome]) -> str:
    """One line saying what the table shows, from its own numbers."""
    valid = {o.name: prompt_scores.pooled_valid_rate(o.rows).value for o in outcomes}
    models = [o.name for o in outcomes if not o.name.startswith(("oracle", "collapsed"))]
    refs = {o.name.split()[0]: o for o in outcomes if o.name.startswith(("oracle", "collapsed"))}
    parts = ", ".join(f"{n} {100 * valid[n]:.0f}%" for n in models)
    line = f"What you see: training turns prose into numbers (answers that are a bare number: {parts})"
    if "oracle" in refs and "collapsed" in refs:
        exact, flat = (refs[k] for k in ("oracle", "collapsed"))
        line += (
            "; pit_w1 and the score say how far those numbers are from exact sampling "
            f"(exact: pit_w1 {prompt_scores.family_mean_pit_w1(exact.rows).value:.2f}, "
            f"score {calibration.calibration_score(exact.rows).value:.0f}; "
            f"collapsed: pit_w1 {prompt_scores.family_mean_pit_w1(flat.rows).value:.2f}, "
            f"score {calibration.calibration_score(flat.rows).value:.0f})."
        )
    return line


def run(
    output: Path,
    num_samples: int = SAMPLES,
    batch_size: int = 64,
    families: bool = False,
    adapters: Path = ADAPTERS,
) -> str:
    """Evaluate the demo's systems (lm-eval outputs under ``output``); return its report."""
    outcomes = []
    for system in systems(adapters):
        start = time.monotonic()
        outcomes.append(evaluate(system, output, num_samples, batch_size))
        print(f"== {system.name}: done in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    plot = output / "pit.png"
    try:
        from calbench.leaderboard.pages import plots

        plots.draw_pit_systems([(o.name, o.rows) for o in outcomes], plot)
        plotted = f"PIT histograms (flat = exact sampling): {plot}"
    except ImportError:
        plotted = "PIT histograms: install matplotlib (the plots extra) to draw them"
    parts = [
        f"\ncalbench demo: {TASK} (42 prompts over 30 families, {num_samples} samples each, calbench-hf); "
        f"value ± 95% interval; results under {output}",
        headline(outcomes),
        "",
        examples(outcomes),
        "",
        reading(outcomes),
        plotted,
    ]
    if num_samples < calibration.M_REF:
        parts.append(f"(fewer than {calibration.M_REF} samples per prompt: the score is not the leaderboard's)")
    if families:
        parts += ["", eval_report.numeric_table([(o.name, o.task_results) for o in outcomes])]
    return "\n".join(parts)
