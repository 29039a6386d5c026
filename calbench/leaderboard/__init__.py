"""Leaderboards: run records in, tables and plots out.

* ``records``: the results store (run checks, records with provenance, saving, loading);
* ``score``: the calibration score and the other numbers of a record (pure);
* ``render``: tables, the README's headline block, adapter model cards;
* ``plots``: the ranking chart and per-family sample plots (matplotlib, the ``plots`` extra).

Each layer imports only those above it: ``score`` nothing of the others, ``records`` and
``plots`` ``score``, ``render`` all three.
"""
