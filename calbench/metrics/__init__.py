"""calbench's numbers, as pure functions of answers and laws (no lm-eval, no model).

``sampling`` (W1, the oracle floor, goodness of fit), ``pit`` (PIT distances and KS@N),
``calibration`` (the calibration score), ``likelihood`` (exact KLs over the canonical
space), ``enumeration`` (the sample-free metrics of an enumerated answer distribution),
``prompt_records`` (one record per prompt, then per family, then per split), the transfer
and retention scorers (``mcq``, ``openended``, ``noveltybench``, ``retention``), and
``table``: every metric's name, direction, range and meaning.
"""
