"""Running recipes (``calbench leaderboard run``).

* ``runner``: any recipe, run by its kind;
* ``rows``: a row end to end: its adapter trained if missing, its evaluations run (each one
  ``calbench eval``), its record stored;
* ``commands``: the ``calbench`` processes a run starts (``calbench train`` for rows and curves alike)
  and its progress lines;
* ``curve_run``: a curve's runs trained and every checkpoint scored as a row of its own.
"""
