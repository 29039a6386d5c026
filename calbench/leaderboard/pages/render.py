"""The whole leaderboard written from the store: ``calbench leaderboard render``.

The main table, its CSVs and plots (``render``), the protocol table from the protocol runs'
records (``protocol_page``), and for the recipes of ``rows`` (each read by ``loader.load``)
each trade-off's table and plot (``tradeoff``), each learning curve's page and plot
(``curve_page``) and the evaluation section of each row's adapter card (``card``: the
adapter's record beside its base model's); then the tails page (``tails_page``), all from run
records alone. The headline and protocol tables are spliced into the README, and last the
numbers the hand-written prose quotes from those tables are printed afresh (``quotes``). Each
record is scored once (``numbers.Scored``), and every page reads it scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.pages import board, card, curve_page, protocol_page, quotes, tails_page, tradeoff
from calbench.leaderboard.pages.numbers import Scored, untrained
from calbench.leaderboard.recipes import curves, loader
from calbench.leaderboard.records.record_types import RunRecord
from calbench.leaderboard.records.store import load_records
from calbench.metrics import catalog
from calbench.provenance import atomic_write

TASKS_README = Path("tasks") / "README.md"  # its metric list is the metric catalog's
METRICS_START, METRICS_END = "<!-- metrics:start -->", "<!-- metrics:end -->"


def render_all(
    results_dir: Path,
    output: Path,
    readme: Path | None,
    rows: Path | None = loader.ROWS,
    draw: bool = True,
    root: Path = Path("."),
) -> list[Path]:
    """Write every rendered file; the paths written, in order. With the top-level README
    (``readme``), also the metric list of ``tasks/README.md`` beside it; the rows' adapter
    paths are taken from ``root`` (the repository's root)."""
    records = [Scored(r) for r in load_records(results_dir)]  # each scored once, for every page below
    by_name = {s.name: s for s in records}
    protocol_dir = results_dir / protocol_page.FOLDER
    protocol_runs = load_records(protocol_dir) if protocol_dir.is_dir() else []
    if not records and not protocol_runs:
        raise RefusedRunError(f"no run records under {results_dir} or {protocol_dir}")
    written = board.write_all(records, output, readme, draw=draw) if records else []
    if protocol_runs:
        written += protocol_page.write(protocol_runs, output, readme, draw=draw)
    loaded = [loader.load(p) for p in loader.recipe_files(rows)] if rows is not None and rows.is_dir() else []
    for spec in (r for r in loaded if isinstance(r, loader.TradeoffRecipe)):
        if not set(by_name) & {spec.base, *spec.adapters}:
            continue  # another store's trade-off
        base, *adapters = named(by_name, [spec.base, *spec.adapters], results_dir)
        command = f"calbench leaderboard render   # {spec.path.as_posix()}"
        written += tradeoff.write(base, adapters, output, command, draw_plot=draw)
    ends: list[tuple[str, RunRecord]] = []  # the base model's point once, then each curve's last point: the tails page
    for curve in (r for r in loaded if isinstance(r, curves.Curves)):
        curve = curves.with_results_dir(curve, results_dir / curve.results_dir.name)
        bases = {run.model for run in curve.runs}  # the models the curve's runs train: their records beside the runs
        references = [
            s
            for s in records
            if s.record["type"] == "reference" or (untrained(s.record) and s.record["model"]["pretrained"] in bases)
        ]
        written += curve_page.write(curve, output, draw_plot=draw, references=references)
        for run, points in curve_page.load_points(curve).items():
            if not ends and points[0]["curve"]["step"] == 0:
                ends.append((f"{run} step 0", points[0]))  # the base model, once
            if points[-1]["curve"]["step"] > 0:
                ends.append((f"{run} step {points[-1]['curve']['step']}", points[-1]))
    written += tails_page.write(records, output, ends)
    written += cards([r for r in loaded if isinstance(r, loader.Recipe)], by_name, results_dir, root)
    tasks_readme = readme.parent / TASKS_README if readme is not None else None
    if tasks_readme is not None and tasks_readme.is_file():
        text = board.splice_readme(tasks_readme.read_text(), catalog.markdown(), METRICS_START, METRICS_END)
        atomic_write(tasks_readme, text)
        written.append(tasks_readme)
    written += quotes.write(written, output)  # the prose's numbers, from the tables just written
    return list(dict.fromkeys(written))


def named(by_name: Mapping[str, Scored], names: Sequence[str], folder: Path) -> list[Scored]:
    """The records ``names`` of a results folder's (scored) records, in that order; refused if one is missing."""
    missing = [n for n in names if n not in by_name]
    if missing:
        raise RefusedRunError(f"no run record named {', '.join(missing)} in {folder}")
    return [by_name[n] for n in names]


def cards(
    row_recipes: Sequence[loader.Recipe], by_name: Mapping[str, Scored], results_dir: Path, root: Path = Path(".")
) -> list[Path]:
    """Each row adapter's card (and each full fine-tune's, in its card folder), with its record and
    its base model's (the row of the same model, neither adapter nor fine-tune), where the store
    holds the records and the folder its card."""
    written = []
    for r in row_recipes:
        folder = r.adapter or r.fine_tune
        if folder is None or r.name not in by_name or not (root / folder / "README.md").is_file():
            continue
        bases = [
            b.name
            for b in row_recipes
            if b.adapter is None and b.fine_tune is None and b.model == r.model and b.name in by_name
        ]
        written.append(card.write_card(root / folder, named(by_name, [r.name, *bases[:1]], results_dir)))
    return written
