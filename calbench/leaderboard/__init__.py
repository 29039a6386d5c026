"""Leaderboards: recipes in, run records stored, tables, plots and pages out.

Running rows:

* ``recipes``: the YAML recipes of ``leaderboards/rows/`` read and checked (rows, the protocol
  matrix, trade-offs, curves);
* ``rows``: ``calbench leaderboard run`` for a row: its adapter trained if missing, its
  evaluations run (each one ``calbench eval``), its record stored;
* ``curves``: learning-curve recipes: every checkpoint of a training run scored as a row of its own.

The store:

* ``checks``: which runs the store accepts, and what a stored record must look like;
* ``store``: run records built from lm-eval's output, saved with their stored samples, loaded.

Rendering, from records alone:

* ``numbers``: the calibration score and the other numbers of a record (pure);
* ``render``: the leaderboard's tables (markdown and CSV) and the README's headline block;
* ``plots``: the ranking chart, PIT histograms and per-family sample plots (matplotlib);
* ``card``: the evaluation section of an adapter's model card;
* ``protocol_page``: every system under every sampling protocol;
* ``tradeoff``: calibration gained against retention lost, one point per adapter;
* ``tails_page``: where each row's PIT tails come from;
* ``publish``: all of the above, written by ``calbench leaderboard render``.
"""
