"""Leaderboards: recipes in, run records stored, tables, plots and pages out.

Four rooms, each a sub-package whose ``__init__`` lists its modules with their jobs, and one
module they share. Imports run one way: ``records`` and ``recipes`` import neither ``pages`` nor
``run``; ``pages`` draws from records (and reads recipes) without running anything; ``run``
(``calbench leaderboard run``) sits on top.

* ``errors``: the refusals every room raises (``RefusedRunError``, ``RecipeError``);
* ``records``: the run records: their shape, which runs the store accepts, the store, re-scoring;
* ``recipes``: the recipe files: their fields, every kind, learning curves;
* ``pages``: everything rendered from records alone (``calbench leaderboard render``);
* ``run``: recipes run: rows, learning curves, and the ``calbench`` processes they start.

The task and prompt-set names are ``calbench.task_names``'; what the leaderboard shares with the
training add-on (run-folder files, card sections, recorded options) is ``calbench.train_record``'s.
"""

from pathlib import Path

RESULTS = Path("leaderboards") / "results"  # the results store: published records, named by the pages
WORKDIR = Path("calbench_results") / "rows"  # lm-eval's raw output, rows' trained weights, curves' run folders
