"""Leaderboards: recipes in, run records stored, tables, plots and pages out.

Recipes and running them (``calbench leaderboard run``):

* ``recipe_fields``: a recipe's YAML, read safely, and the fields every kind shares, checked;
* ``recipes``: every recipe kind (a row, the protocol matrix, a trade-off, a learning curve),
  loaded by ``recipes.load``;
* ``curves``: a learning-curve recipe: its training runs and its protocol;
* ``runner``: any recipe, run by its kind;
* ``rows``: a row end to end: its adapter trained if missing, its evaluations run (each one
  ``calbench eval``), its record stored;
* ``curve_run``: a curve's runs trained and every checkpoint scored as a row of its own.

The store:

* ``record_types``: the run record's shape, as types;
* ``checks``: which runs the store accepts, and what a stored record must look like;
* ``store``: run records built from lm-eval's output, saved with their stored samples, loaded;
* ``rescoring``: a record's sampling aggregates scored again from its stored answers: compared
  with what it stores, and rewritten after a metric's definition changes.

Rendering, from records alone (``calbench leaderboard render``):

* ``numbers``: the calibration score and a record's other numbers (pure), each record scored once;
* ``render``: the leaderboard's tables (markdown and CSV) and the README's headline block;
* ``plots``: the ranking chart, PIT histograms and per-family sample plots (matplotlib);
* ``card``: the evaluation section of an adapter's model card, and its ``model-index``;
* ``export``: a record as an Every Eval Ever 0.3.0 file, and a card's ``model-index`` numbers;
* ``protocol_page``: every system under every sampling protocol;
* ``tradeoff``: calibration gained against retention lost, one point per adapter;
* ``curve_page``: a learning curve's page and plot;
* ``tails_page``: where each row's PIT tails come from;
* ``quotes``: the numbers hand-written prose quotes from the rendered tables, printed from them;
* ``publish``: all of the above, each record scored once.
"""
