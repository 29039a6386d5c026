"""The results store: run records, their checks, saved and loaded, and re-scored.

* ``record_types``: the run record's shape, as types;
* ``checks``: which runs the store accepts, and what a stored record must look like;
* ``store``: run records built from lm-eval's output, saved with their stored samples, loaded;
* ``rescoring``: a record's sampling aggregates scored again from its stored answers: compared
  with what it stores, and rewritten after a metric's definition changes.
"""
