"""The leaderboard rendered: tables (markdown and CSV) and the README's headline block.

``render`` turns run records into ``leaderboards/README.md`` and one CSV per table;
``write_all`` writes them (and the plots) and splices the headline table into the
top-level README. Adapter model cards are ``calbench.leaderboard.pages.card``'s. Each takes run records
or records already scored (``numbers.Scored``) and scores each record once: a table's columns
read the scored record.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tabulate import tabulate

from calbench.families import split_points
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages import plots
from calbench.leaderboard.pages.numbers import (
    TIERS,
    Scored,
    drift_metric,
    ranked,
    samples_per_prompt,
    scored,
    task_metric,
    threshold_score,
    tier_metric,
)
from calbench.leaderboard.records.record_types import RunRecord
from calbench.markdown import code_block
from calbench.metrics.catalog import arrow
from calbench.param_ranges import in_range
from calbench.provenance import atomic_write
from calbench.stats import Estimate, fmt
from calbench.task_names import EXACT_TASKS, LIKELIHOOD_TASKS, SAMPLING_TASKS, SPLIT_LABELS
from calbench.train_record import trained_option

Cell = Estimate | str  # a value with its standard error, or why there is none
Column = tuple[str, Callable[[Scored], Cell]]


def _column(label: str, metric: str, fn: Callable[[Scored], Cell]) -> Column:
    """A table column headed ``label`` and the metric's direction arrow (``calbench.metrics.catalog``)."""
    return (f"{label} {arrow(metric)}", fn)


def _task_column(label: str, task: str, metric: str) -> Column:
    return _column(label, metric, lambda s: task_metric(s.record, task, metric))


OE, MCQ, NB = "calbench_open_ended", "calbench_mcq_balance", "calbench_noveltybench"
ARITHMETIC, MMLU_MINI, FORMAT = "calbench_arithmetic", "calbench_mmlu_mini", "calbench_format_following"


def _samples(s: Scored) -> Cell:
    n = samples_per_prompt(s.record)
    return "n/a" if n is None else str(n)


HEADLINE = (
    _column("score", "calibration_score", lambda s: s.calibration_score),
    ("samples/prompt", _samples),
    ("prompts < 50 valid", lambda s: s.below_reference),
    _column("valid_rate", "valid_rate", lambda s: s.valid_rate),
    _column("pit_w1", "pit_w1", lambda s: s.mean_pit_w1),
    _column("KS@100", "ks_at_n", lambda s: s.ks_at_n),
    _task_column("unseen excess_w1_iqr median", SAMPLING_TASKS["unseen"], "excess_w1_iqr_median"),
    _task_column("held-out excess_w1_iqr median", SAMPLING_TASKS["heldout"], "excess_w1_iqr_median"),
    _column("CS@n", "calibration_score", lambda s: threshold_score(s.record)),
    _task_column("unseen seq_kl", LIKELIHOOD_TASKS["unseen"], "seq_kl"),
    _task_column("open-ended support_90", OE, "support_90"),
    _task_column("MCQ tv_distance", MCQ, "tv_distance"),
    _column("drift", "drift_kl", lambda s: drift_metric(s.record)),
)


def table_rows(
    records: Sequence[RunRecord | Scored], columns: Sequence[Column], rank: bool = False
) -> tuple[list[str], list[list[str]]]:
    """A table's headers and rows: one row per record, in the order given (``rank``: numbered)."""
    headers = [*(["#"] if rank else []), "system", "type", *(c for c, _ in columns)]
    rows = []
    for i, s in enumerate(scored(records), 1):
        cells = [c if isinstance(c := fn(s), str) else fmt(c) for _, fn in columns]
        rows.append([*([str(i)] if rank else []), s.name, s.record["type"], *cells])
    return headers, rows


def _split_columns(split: str) -> list[Column]:
    sampling = ("w1_iqr", "excess_w1_iqr", "excess_w1_iqr_median", "valid_rate", "gof_pass_rate")
    likelihood = ("seq_kl", "canonical_mass", "exact_w1_iqr", "logit_kl")
    enumerated = ("valid_mass", "enum_w1_iqr_median", "enum_w1_iqr_bound", "enum_pit_w1")
    return [
        *(_task_column(m, SAMPLING_TASKS[split], m) for m in sampling),
        *(_task_column(m, LIKELIHOOD_TASKS[split], m) for m in likelihood),
        *(_task_column(f"sample-free {m}", EXACT_TASKS[split], m) for m in enumerated),
    ]


def _tier_column(tier: int, metric: str) -> Column:
    return _column(f"tier {TIERS[tier]} {metric}", metric, lambda s: tier_metric(s.record, tier, metric))


def _tier_columns() -> list[Column]:
    return [_tier_column(t, m) for t in TIERS for m in ("excess_w1_iqr", "valid_rate")]


def _transfer_columns() -> list[Column]:
    return [
        *(_task_column(m, OE, m) for m in ("support_90", "unique_answers", "answer_entropy")),
        *(_task_column(f"MCQ {m}", MCQ, m) for m in ("tv_distance", "tv_distance_lenient", "parse_rate")),
        _task_column("MCQ parse_rate_lenient", MCQ, "parse_rate_lenient"),
        *(
            _task_column(f"NoveltyBench {s} distinct_lite", f"{NB}_{s}", "distinct_lite")
            for s in ("curated", "wildchat")
        ),
        *(_task_column(f"arithmetic {m}", ARITHMETIC, m) for m in ("exact_strict", "exact_flexible")),
        _task_column("mmlu_mini acc", MMLU_MINI, "acc"),
        *(_task_column(f"format {m}", FORMAT, m) for m in ("strict_acc", "loose_acc")),
        _column("drift", "drift_kl", lambda s: drift_metric(s.record)),
    ]


def _trained(record: RunRecord) -> tuple[str, float] | None:
    """An adapter's (or a full fine-tune's) training prompts and the factor their ranges were widened
    by (1 for the grid), from its recipe, as trained (``train_record.trained_option``); None without
    a training recipe."""
    recipe = record.get("recipe") or {}
    train = (recipe.get("adapter") or recipe.get("fine_tune") or {}).get("train")
    if not isinstance(train, Mapping):
        return None
    parameters = trained_option(train, "parameters")
    return parameters, 1.0 if parameters == "grid" else float(trained_option(train, "widen"))


def training_prompts(record: RunRecord) -> str:
    """An adapter's training distribution, from its recipe: the grid or fresh parameters."""
    trained = _trained(record)
    if trained is None:
        return "n/a"
    parameters, widen = trained
    if parameters == "grid":
        return "grid"
    return "fresh" if widen == 1 else f"fresh, {widen:g}x ranges"


def unseen_in_range(record: RunRecord) -> str:
    """Whether the adapter's training ranges cover the unseen split's prompts (then the unseen
    column measures interpolation, not extrapolation): the share of its 24 prompts inside them."""
    trained = _trained(record)
    if trained is None:
        return "n/a"
    widen = trained[1]
    unseen = split_points("unseen", "selected")
    inside = sum(in_range(t, widen) for t in unseen)
    return f"{inside} of {len(unseen)}"


def _split_score(split: str) -> Callable[[Scored], Cell]:
    return lambda s: s.split_score(split)


def _split_following(split: str) -> Callable[[Scored], Cell]:
    return lambda s: s.split_following(split)


def split_score_columns() -> list[Column]:
    out: list[Column] = [("training prompts", lambda s: training_prompts(s.record))]
    for split, label in SPLIT_LABELS.items():
        out.append(_column(f"{label} score", "calibration_score", _split_score(split)))
        out.append(_column(f"{label} rho", "medians_rho", _split_following(split)))
        if split == "unseen":
            out.append(("unseen prompts in training ranges", lambda s: unseen_in_range(s.record)))
    return out


TABLES = {
    "headline": ("Headline", lambda: list(HEADLINE)),
    "splits": ("Training prompts, interpolation, unseen, held-out", split_score_columns),
    "unseen": ("Unseen parameters (24 families)", lambda: _split_columns("unseen")),
    "heldout": ("Held-out families (6 families)", lambda: _split_columns("heldout")),
    "tiers": ("Per complexity tier (both splits)", _tier_columns),
    "transfer": ("Transfer and retention", _transfer_columns),
}


def csv_text(headers: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def _describe(r: RunRecord) -> str:
    m = r.get("model", {})
    bits = [str(m.get("backend")), str(m.get("pretrained"))]
    if m.get("endpoint_model"):  # a model behind an API
        bits[1] = f"{m['endpoint_model']} at {m.get('endpoint')}"
        sent = {json.dumps(e["api"]["sent"], sort_keys=True) for e in r["tasks"].values() if "api" in e}
        for settings in sorted(sent):
            pairs = ", ".join(f"{k}={v}" for k, v in json.loads(settings).items() if k != "until")
            bits.append(f"sent {pairs}, a seed per sample")
    fine_tune = (r.get("recipe") or {}).get("fine_tune")
    if fine_tune:  # its weights live in the work folder: name the model it tunes and its card
        bits[1] = f"a full fine-tune of {r['recipe']['model']} (card {fine_tune['card']})"
    if m.get("adapter"):
        bits.append(f"adapter {m['adapter']} ({m.get('adapter_sha256')})")
    if m.get("weights_sha256"):
        bits.append(f"weights {m['weights_sha256']}")
    n = {t: e.get("samples_per_prompt") for t, e in r["tasks"].items() if e.get("samples_per_prompt")}
    if n:
        bits.append("samples/prompt " + ", ".join(f"{t.removeprefix('calbench_')}={k}" for t, k in sorted(n.items())))
    return "; ".join(bits)


def render(records: Sequence[RunRecord | Scored], plot_files: Sequence[str] = ()) -> dict[str, str]:
    """The leaderboard's text files: ``README.md`` and one CSV per table (name -> content)."""
    order = ranked(scored(records))
    files: dict[str, str] = {}
    lines = [
        "Rendered by `calbench leaderboard render` from the run records in `results/`; do not edit by hand.",
        "Value ± 95% interval half-width (1.96 standard errors); `n/a` where a system was not run on a task.",
        "**score**: the calibration score ([`calbench/metrics/calibration.py`](../calbench/metrics/calibration.py)),",
        'from each row\'s stored samples; it needs 50 samples per prompt ("too few samples" below), and a prompt',
        'with fewer than 50 valid answers ("prompts < 50 valid") is scored on what it has, which is not',
        "sample-size-free. pit_w1, KS@100 and the valid rate come from the stored samples too; CS@n, the former",
        "score, depends on the samples per prompt (for reference only). Excess W1 columns are medians over",
        "families. Every metric: [`tasks/README.md`](../tasks/README.md#metrics).",
        "",
    ]
    for key, (title, columns) in TABLES.items():
        headers, rows = table_rows(order, columns(), rank=key == "headline")
        lines += [f"## {title}", "", tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True), ""]
        files[f"tables/{key}.csv"] = csv_text(headers, rows)
    if plot_files:
        lines += ["## Plots", "", f"![ranking]({plot_files[0]})", ""]
        lines += ["Each system's PIT histogram (flat for exact sampling, whatever the family):", ""]
        lines += [f"![PIT histograms]({plot_files[1]})", "", "Samples against the target, per family:", ""]
        lines += [" · ".join(f"[{Path(p).stem}]({p})" for p in plot_files[2:]), ""]
    lines += ["## Systems and how to reproduce them", ""]
    for r in (s.record for s in order):
        lines += [f"**{r['name']}** ({r['type']}): {_describe(r)}", "", *code_block(r["command"].strip(), "bash"), ""]
    files["README.md"] = "\n".join(lines).rstrip() + "\n"
    return files


BOARD_START, BOARD_END = "<!-- board:start -->", "<!-- board:end -->"


def board_page(existing: str | None, board: str, title: str = "calbench leaderboard") -> str:
    """A page with hand-written text around the board markers, ``board`` spliced between them; a
    page that does not exist yet (or is empty) becomes the board alone under ``title``. A page with
    text but not exactly one start and one end marker, in that order, is refused: its text is never
    cut (one mistyped marker used to drop every hand-written line after it)."""
    if existing is None or not existing.strip():
        return f"# {title}\n\n{BOARD_START}\n{board.rstrip()}\n{BOARD_END}\n"
    starts, ends = existing.count(BOARD_START), existing.count(BOARD_END)
    if starts != 1 or ends != 1 or existing.index(BOARD_START) > existing.index(BOARD_END):
        raise RefusedRunError(
            f"the page has {starts} {BOARD_START} and {ends} {BOARD_END} markers (one of each, in that order, "
            "around the rendered board): fix them; nothing was written"
        )
    return splice_readme(existing, board.rstrip("\n"), BOARD_START, BOARD_END)


# The top-level README's table: the ranking and a few numbers (every column is in leaderboards/README.md).
NARROW = (
    _column("score", "calibration_score", lambda s: s.calibration_score),
    _column("valid_rate", "valid_rate", lambda s: s.valid_rate),
    _column("pit_w1", "pit_w1", lambda s: s.mean_pit_w1),
    _column("unseen score", "calibration_score", _split_score("unseen")),
    _column("training prompts score", "calibration_score", _split_score("train")),
    _column("drift", "drift_kl", lambda s: drift_metric(s.record)),
)


def headline_markdown(records: Sequence[RunRecord | Scored]) -> str:
    """The README's narrow headline: rank, system, type and ``NARROW``'s columns."""
    headers, rows = table_rows(ranked(scored(records)), NARROW, rank=True)
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


README_START, README_END = "<!-- leaderboard:start -->", "<!-- leaderboard:end -->"


def splice_readme(readme: str, block: str, start: str = README_START, end: str = README_END) -> str:
    """The top-level README with ``block`` between its ``start`` and ``end`` markers (by default
    the leaderboard's headline block)."""
    starts, ends = readme.count(start), readme.count(end)
    if starts != 1 or ends != 1 or readme.index(start) > readme.index(end):
        raise RefusedRunError(
            f"the README has {starts} {start} and {ends} {end} markers (one of each, in that order, around "
            "the block): fix them; nothing was written"
        )
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def write_all(records: Sequence[RunRecord | Scored], out: Path, readme: Path | None, draw: bool = True) -> list[Path]:
    """Render tables (and plots, if asked) under ``out``; splice the headline into ``readme``."""
    records = scored(records)  # once, for the tables, the plots and the headline
    pages = render(records, plots.plot_paths(records))
    board = out / "README.md"
    if "README.md" in pages:
        pages["README.md"] = board_page(board.read_text() if board.is_file() else None, pages["README.md"])
    headline = splice_readme(readme.read_text(), headline_markdown(records)) if readme is not None else None
    # every page is made before any is written: a page refused for its markers leaves all as they were
    if draw:
        plots.draw_all(records, out)  # matplotlib: the plots extra
    written = []
    for name, content in pages.items():
        atomic_write(out / name, content)
        written.append(out / name)
    if readme is not None and headline is not None:
        readme.write_text(headline)
        written.append(readme)
    return written
