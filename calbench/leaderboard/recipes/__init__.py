"""Recipes: the files that say what a leaderboard row, matrix, trade-off or curve is.

* ``fields``: a recipe's YAML, read safely, and the fields every kind shares, checked (its
  ``train:`` options validated by the training add-on when the recipe loads);
* ``loader``: every recipe kind (a row, the protocol matrix, a trade-off, a learning curve),
  loaded by ``loader.load``;
* ``curves``: a learning-curve recipe: its training runs and its protocol.
"""
