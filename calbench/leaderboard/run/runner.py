"""``calbench leaderboard run``: any recipe, run by its kind.

``recipes.load`` reads a recipe file as its kind's object; ``run`` runs it: a row end to end
(``rows.run_row``: its adapter trained if missing, its evaluations run, its record stored), each
system of the protocol matrix as a row, each run of a learning curve and its checkpoints
(``curve_run.run_curves``). A trade-off has nothing to run: it is rendered from its rows' records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from calbench.evaluation import unresolved_tasks
from calbench.leaderboard import WORKDIR
from calbench.leaderboard.errors import RefusedRunError
from calbench.leaderboard.recipes.curves import Curves, with_results_dir
from calbench.leaderboard.recipes.fields import Evaluation
from calbench.leaderboard.recipes.loader import Loaded, ProtocolMatrix, Recipe
from calbench.leaderboard.run import curve_run, rows


@dataclass(frozen=True)
class RunOptions:
    """How to run recipes (``calbench leaderboard run``'s options)."""

    workdir: Path = WORKDIR  # lm-eval's raw output and the training runs
    results_dir: Path | None = None  # a store for the records instead of each recipe's own
    only: Sequence[str] | None = None  # these evaluations of a row, or these runs of a curve
    rerun: bool = False  # run the chosen evaluations even if finished
    replace: bool = False  # replace a stored record another recipe made
    train: bool = True  # train what is unfinished (False: curves score the checkpoints already there, a full fine-tune row refuses)


def evaluations(recipe: Loaded) -> list[Evaluation]:
    """Every evaluation a recipe would run (a trade-off runs none)."""
    if isinstance(recipe, Recipe):
        return list(recipe.evaluations)
    if isinstance(recipe, ProtocolMatrix):
        return [e for row in recipe.rows for e in row.evaluations]
    if isinstance(recipe, Curves):
        return [*recipe.protocol, *recipe.final]
    return []


def check(recipe: Loaded, options: RunOptions) -> None:
    """Refuse what ``run`` would refuse only midway: a curve's ``--only`` naming no run of it; and
    a task that is not a name of calbench's or lm-eval's task index (lm-eval would read a file of
    that name as a task and import the Python beside it: a recipe runs no code)."""
    if isinstance(recipe, Curves):
        unknown = sorted(set(options.only or ()) - {r.name for r in recipe.runs})
        if unknown:
            known = ", ".join(r.name for r in recipe.runs)
            raise RefusedRunError(f"{recipe.path}: --only {', '.join(unknown)}: no such run (its runs: {known})")
    tasks = sorted({t for e in evaluations(recipe) for t in e.tasks})
    unresolved = unresolved_tasks(tasks) if tasks else []
    if unresolved:
        raise RefusedRunError(
            f"{recipe.path}: tasks {', '.join(unresolved)}: not in calbench's or lm-eval's task index "
            "(a recipe names tasks, never files: see calbench tasks-path and lm-eval's task list)"
        )


def run(recipe: Loaded, options: RunOptions) -> list[Path]:
    """Run one recipe of any kind; the record files written, in order."""
    check(recipe, options)
    o = options
    if isinstance(recipe, Recipe):
        return [rows.run_row(recipe, o.workdir, o.results_dir, o.only, o.rerun, o.replace, o.train)]
    if isinstance(recipe, ProtocolMatrix):
        return [rows.run_row(r, o.workdir, o.results_dir, o.only, o.rerun, o.replace) for r in recipe.rows]
    if isinstance(recipe, Curves):
        if o.results_dir is not None:
            recipe = with_results_dir(recipe, o.results_dir / "curves")
        return curve_run.run_curves(recipe, o.workdir, o.only, train=o.train)  # --only: runs
    return []  # a trade-off: rendered from its rows' records


def run_all(recipes: Sequence[Loaded], options: RunOptions) -> Iterator[Path]:
    """Every recipe checked, then each run in order; the record files written, as each recipe ends."""
    for recipe in recipes:
        check(recipe, options)
    for recipe in recipes:
        yield from run(recipe, options)
